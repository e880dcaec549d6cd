//! Pandora behind Redis's protocol: a client's commands run as Pandora
//! transactions on a compute server's coordinators (`tandem serve --system
//! pandora`). Each data command is one strictly serializable transaction;
//! `MULTI`/`EXEC` one transaction for the block, with `WATCH`ed keys in its
//! read set; an abort is run again. A commit whose outcome is unknown is
//! answered `-INDOUBT`, never `+OK`.
//!
//! Errors a client may see besides Redis's own: `-TRYAGAIN` (a memory node
//! is unavailable, or conflicts went on too long: nothing was written),
//! `-CLUSTERDOWN` (this compute server was declared failed: reconnect to
//! another), `-INDOUBT` (the outcome of a commit is unknown).

pub mod command;
pub mod embedded;
pub mod lend;
pub mod record;
pub mod run;
pub mod serve;
mod session;

pub use embedded::Embedded;
pub use lend::{Lender, Live};
pub use run::Keyspace;
pub use serve::{serve, Front, FrontConfig};
pub use session::Session;
