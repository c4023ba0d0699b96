//! The name of the host an owner or a client runs on, as the store's leases and task queues
//! show it (`docs/format.md` § Owner lease).

/// This machine's name, as leases show it: `/proc/sys/kernel/hostname`, else `$HOSTNAME`,
/// else `localhost`.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "localhost".to_owned())
}
