//! Single-threaded one-shot channel used to hand a completion to a waiting task.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
    sender_dropped: bool,
}

pub struct OneshotSender<T>(Rc<RefCell<Slot<T>>>);
/// Resolves to `Some(value)`, or `None` if the sender was dropped unsent.
pub struct OneshotReceiver<T>(Rc<RefCell<Slot<T>>>);

pub fn oneshot<T>() -> (OneshotSender<T>, OneshotReceiver<T>) {
    let slot = Rc::new(RefCell::new(Slot {
        value: None,
        waker: None,
        sender_dropped: false,
    }));
    (OneshotSender(slot.clone()), OneshotReceiver(slot))
}

impl<T> OneshotSender<T> {
    pub fn send(self, value: T) {
        let waker = {
            let mut s = self.0.borrow_mut();
            s.value = Some(value);
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Drop for OneshotSender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.0.borrow_mut();
            s.sender_dropped = true;
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Future for OneshotReceiver<T> {
    type Output = Option<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut s = self.0.borrow_mut();
        if let Some(v) = s.value.take() {
            return Poll::Ready(Some(v));
        }
        if s.sender_dropped {
            return Poll::Ready(None);
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}
