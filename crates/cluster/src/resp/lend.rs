//! The coordinators a front end lends to its clients, one per transaction,
//! and what takes them away. On a compute server they belong to an
//! incarnation: when it is fenced, a command under way is cut off where it
//! stands (as a crash would cut it) and answered `-INDOUBT` if it could
//! have written, `-CLUSTERDOWN` if it only read; until the next
//! incarnation opens, every command is answered `-CLUSTERDOWN`. While a
//! memory reconfiguration holds transactions (the [`Gate`]), a command
//! waits, and after [`GATE_PATIENCE`] is answered `-TRYAGAIN`.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use tandem_dkvs::Coordinator;
use tandem_fabric::Fabric;
use tandem_resp::Reply;
use tokio::sync::watch;

use crate::procs::follow::Gate;
use crate::procs::session::Stop;

/// How long a command waits for a memory reconfiguration to finish.
pub const GATE_PATIENCE: Duration = Duration::from_secs(2);

/// What an open incarnation shares with its lender.
#[derive(Clone)]
pub struct Live {
    /// Holds transactions while the memory configuration changes (none: never).
    pub gate: Option<Rc<Gate>>,
    /// Set once the incarnation ends (fenced, or its membership lost).
    pub stop: Rc<watch::Sender<Option<Stop>>>,
}

impl Default for Live {
    /// Never held, never stopped (the embedded store).
    fn default() -> Self {
        Live {
            gate: None,
            stop: Rc::new(watch::channel(None).0),
        }
    }
}

pub struct Lender<F: Fabric> {
    coords: RefCell<Vec<Coordinator<F>>>,
    /// Counts opens and closes: a coordinator of an earlier one is not taken back.
    generation: Cell<u64>,
    /// The open incarnation's node id and its signals, or why none is open.
    live: RefCell<Result<(u16, Live), String>>,
}

impl<F: Fabric> Lender<F> {
    pub fn down(why: &str) -> Self {
        Lender {
            coords: RefCell::new(Vec::new()),
            generation: Cell::new(0),
            live: RefCell::new(Err(why.to_string())),
        }
    }

    /// Lend `coords` of incarnation `node` from now on.
    pub fn open(&self, node: u16, coords: Vec<Coordinator<F>>, live: Live) {
        self.generation.set(self.generation.get() + 1);
        *self.coords.borrow_mut() = coords;
        *self.live.borrow_mut() = Ok((node, live));
    }

    /// Lend nothing until the next [`Lender::open`]; commands under way are cut off.
    pub fn close(&self, why: &str) {
        self.fence(why);
        self.generation.set(self.generation.get() + 1);
        self.coords.borrow_mut().clear();
        *self.live.borrow_mut() = Err(why.to_string());
    }

    /// End the open incarnation (the first reason sticks).
    pub fn fence(&self, why: &str) {
        if let Ok((_, live)) = &*self.live.borrow() {
            crate::procs::compute::stop_with(&live.stop, Stop::Fenced(why.to_string()));
        }
    }

    /// `INFO`'s lines about the incarnation.
    pub fn info(&self) -> String {
        match &*self.live.borrow() {
            Ok((node, _)) => format!(
                "tandem_state:up\r\ntandem_node:{node}\r\ntandem_incarnation:{}\r\n",
                self.generation.get()
            ),
            Err(why) => format!(
                "tandem_state:down ({why})\r\ntandem_incarnation:{}\r\n",
                self.generation.get()
            ),
        }
    }

    /// Run `f` on a free coordinator (waiting while every one is lent),
    /// cut off if the incarnation ends first; `writes`: whether a cut-off
    /// run may have written (then its outcome is unknown).
    pub async fn run<T, Fut>(
        &self,
        writes: bool,
        f: impl FnOnce(Coordinator<F>) -> Fut,
    ) -> Result<T, Reply>
    where
        Fut: Future<Output = (Coordinator<F>, Result<T, Reply>)>,
    {
        let (generation, live, c) = self.borrow().await?;
        let mut stop = live.stop.subscribe();
        let ended = async move {
            let _ = stop.wait_for(|s| s.is_some()).await;
        };
        let held = live.gate.clone();
        let run = async move {
            let _in_flight = match held {
                Some(g) => match tokio::time::timeout(GATE_PATIENCE, g.enter()).await {
                    Ok(guard) => Some(guard),
                    Err(_) => return (c, Err(Reply::err(format!("TRYAGAIN the memory configuration has been changing for {GATE_PATIENCE:?}; nothing was written")))),
                },
                None => None,
            };
            f(c).await
        };
        tokio::select! {
            (c, r) = run => {
                if self.generation.get() == generation {
                    self.coords.borrow_mut().push(c);
                }
                r
            }
            _ = ended => Err(cut_off(writes)),
        }
    }

    /// A free coordinator of the open incarnation, or `-CLUSTERDOWN`.
    async fn borrow(&self) -> Result<(u64, Live, Coordinator<F>), Reply> {
        loop {
            match &*self.live.borrow() {
                Err(why) => return Err(down(why)),
                Ok((_, live)) if live.stop.borrow().is_some() => {
                    return Err(down("its incarnation ended"))
                }
                Ok((_, live)) => {
                    if let Some(c) = self.coords.borrow_mut().pop() {
                        return Ok((self.generation.get(), live.clone(), c));
                    }
                }
            }
            tokio::task::yield_now().await;
        }
    }
}

fn down(why: &str) -> Reply {
    Reply::err(format!("CLUSTERDOWN this compute server has no live incarnation ({why}); retry, or reconnect to another"))
}

fn cut_off(writes: bool) -> Reply {
    match writes {
        true => Reply::err("INDOUBT this compute server was fenced while the command ran: it may or may not have taken effect"),
        false => down("it was fenced while the command ran; nothing was written"),
    }
}
