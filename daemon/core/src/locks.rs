//! How dsh-core takes its locks: every `Mutex` and `RwLock` through [`lock`], [`read_lock`] and
//! [`write_lock`]. A lock whose holder panicked is used as it was left, not refused: refusing
//! every later call over one panic (a bug) would stop the daemon's other agents too. A leaf, so
//! every module names it without naming anything above itself.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `mutex`, as every lock in the crate is taken: a thread that panicked while holding it
/// does not stop later users, which go on with the data as it was left (refusing all later work
/// over one panic would lose more).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// [`lock`], for reading an `RwLock`.
pub(crate) fn read_lock<T>(rwlock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    rwlock.read().unwrap_or_else(PoisonError::into_inner)
}

/// [`lock`], for writing an `RwLock`.
pub(crate) fn write_lock<T>(rwlock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    rwlock.write().unwrap_or_else(PoisonError::into_inner)
}
