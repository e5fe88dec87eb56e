//! Which file descriptors are ours: a bit per descriptor, looked at without a lock by every
//! intercepted call (most are not ours and go straight to the C library), and what each of
//! ours is. Duplicates (`dup`, `F_DUPFD`) share one entry, as they share one open file
//! description in the kernel.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::epoll::Epoll;
use crate::sock::Socket;

/// Descriptors below this can be ours; a socket whose placeholder lands above it stays the
/// kernel's (logged).
pub const MAX_FD: usize = 1 << 16;
const WORDS: usize = MAX_FD / 64;

static BITS: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];
static MAP: RwLock<Vec<Option<Entry>>> = RwLock::new(Vec::new());

/// One of our descriptors.
#[derive(Clone)]
pub enum Entry {
    /// A TCP socket the stack may serve (decided at bind or connect).
    Socket(Arc<Socket>),
    /// An epoll instance that watches some of our sockets.
    Epoll(Arc<Epoll>),
}

/// Return whether `fd` is ours (no lock).
pub fn is_ours(fd: i32) -> bool {
    let Ok(fd) = usize::try_from(fd) else { return false };
    fd < MAX_FD && BITS[fd / 64].load(Ordering::Acquire) & (1 << (fd % 64)) != 0
}

/// Return what `fd` is, if ours.
pub fn get(fd: i32) -> Option<Entry> {
    if !is_ours(fd) {
        return None;
    }
    MAP.read().unwrap_or_else(|e| e.into_inner()).get(fd as usize).cloned().flatten()
}

/// Return the socket `fd` is, if it is one of ours.
pub fn socket(fd: i32) -> Option<Arc<Socket>> {
    match get(fd)? {
        Entry::Socket(s) => Some(s),
        Entry::Epoll(_) => None,
    }
}

/// Make `fd` ours; return whether it could be (it is below [`MAX_FD`]). What `fd` was
/// before is returned to be dropped by the caller, outside the table's lock.
pub fn insert(fd: i32, entry: Entry) -> Result<Option<Entry>, Entry> {
    let Some(i) = usize::try_from(fd).ok().filter(|&i| i < MAX_FD) else {
        return Err(entry);
    };
    let mut map = MAP.write().unwrap_or_else(|e| e.into_inner());
    if map.len() <= i {
        map.resize(i + 1, None);
    }
    counted(&entry, 1);
    let old = map[i].replace(entry);
    if let Some(old) = &old {
        counted(old, -1);
    }
    BITS[i / 64].fetch_or(1 << (i % 64), Ordering::Release);
    Ok(old)
}

/// Keep a socket's count of the descriptors that refer to it (under the table's lock).
fn counted(entry: &Entry, by: isize) {
    if let Entry::Socket(s) = entry {
        if by > 0 {
            s.fds.fetch_add(1, Ordering::SeqCst);
        } else {
            s.fds.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Forget `fd`; return what it was (to be dropped by the caller, outside the lock).
pub fn remove(fd: i32) -> Option<Entry> {
    if !is_ours(fd) {
        return None;
    }
    let i = fd as usize;
    let mut map = MAP.write().unwrap_or_else(|e| e.into_inner());
    BITS[i / 64].fetch_and(!(1 << (i % 64)), Ordering::Release);
    let old = map.get_mut(i).and_then(Option::take);
    if let Some(old) = &old {
        counted(old, -1);
    }
    old
}

/// Forget every descriptor without closing anything (the process exits, or is a forked
/// child whose stack is its parent's): later calls on them go to the kernel's descriptors.
pub fn forget_all() {
    for word in &BITS {
        word.store(0, Ordering::Release);
    }
    let entries = std::mem::take(&mut *MAP.write().unwrap_or_else(|e| e.into_inner()));
    std::mem::forget(entries);
}
