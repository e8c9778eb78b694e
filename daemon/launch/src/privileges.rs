//! Dropping every capability, so a confined command run by root gains nothing from being root:
//! no `mknod`, no tracing or signalling other users' processes, no reading `/proc/<pid>/mem` of
//! processes it does not own, no `CAP_SYS_ADMIN` for `TIOCSTI`.
//!
//! The bounding set goes first, while `CAP_SETPCAP` is still held; then the ambient set (so
//! `exec` hands nothing on), then inheritable, permitted and effective. A process without
//! `CAP_SETPCAP` (an ordinary user) cannot shrink its bounding set; with `no_new_privs` set and
//! nothing permitted, `exec` grants it nothing anyway (the kernel caps the new permitted set at
//! the old one under `no_new_privs`, root's included).

use rustix::thread::{
    CapabilitySet, CapabilitySets, capabilities, capability_is_in_bounding_set,
    clear_ambient_capability_set, remove_capability_from_bounding_set, set_capabilities,
};

/// Drops every capability from every set of this process (it has one thread).
pub(crate) fn drop_all() -> Result<(), String> {
    let held = capabilities(None).map_err(|e| format!("cannot read capabilities: {e}"))?;
    if held.effective.contains(CapabilitySet::SETPCAP) {
        // Capability numbers run up to the kernel's last; past it the kernel answers EINVAL.
        for bit in 0..64 {
            let cap = CapabilitySet::from_bits_retain(1 << bit);
            match capability_is_in_bounding_set(cap) {
                Ok(true) => remove_capability_from_bounding_set(cap).map_err(|e| {
                    format!("cannot drop capability {bit} from the bounding set: {e}")
                })?,
                Ok(false) => {}
                Err(_) => break,
            }
        }
    }
    // EINVAL: a kernel without ambient capabilities (before 4.3) has none to clear.
    match clear_ambient_capability_set() {
        Ok(()) | Err(rustix::io::Errno::INVAL) => {}
        Err(e) => return Err(format!("cannot clear the ambient capabilities: {e}")),
    }
    let none = CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    };
    set_capabilities(None, none).map_err(|e| format!("cannot drop capabilities: {e}"))?;
    let left = capabilities(None).map_err(|e| format!("cannot read capabilities: {e}"))?;
    if !(left.effective.is_empty() && left.permitted.is_empty() && left.inheritable.is_empty()) {
        return Err(format!("capabilities are still held: {left:?}"));
    }
    Ok(())
}
