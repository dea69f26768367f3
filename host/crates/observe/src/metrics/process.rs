//! The `process_*` metrics Prometheus clients export on Linux, read from `/proc` at scrape
//! time: CPU time, memory, file descriptors and start time. Elsewhere nothing is exported.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

/// Clock ticks per second in `/proc/<pid>/stat`: the kernel's `USER_HZ`, 100 on every
/// architecture Linux exports it for (Prometheus's Go client assumes the same).
const USER_HZ: f64 = 100.0;

/// What `/proc` says about this process.
#[derive(Debug, Default, Clone, PartialEq)]
struct Sample {
    cpu_seconds: f64,
    virtual_bytes: f64,
    resident_bytes: f64,
    start_time: f64,
    open_fds: f64,
    max_fds: f64,
    max_virtual_bytes: f64,
}

/// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces and
/// parentheses, so the line is split after its last `)`): utime, stime, starttime (in
/// ticks) and vsize (bytes).
fn parse_stat(stat: &str) -> Option<(f64, f64, f64)> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (state); utime is field 14, stime 15, starttime 22, vsize 23.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
    let cpu = (field(14)? + field(15)?) / USER_HZ;
    Some((cpu, field(22)? / USER_HZ, field(23)?))
}

/// `VmRSS` of `/proc/<pid>/status`, in bytes.
fn parse_rss(status: &str) -> Option<f64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024.0)
}

/// `btime` of `/proc/stat`: when the machine booted, in seconds since the epoch.
fn parse_boot_time(stat: &str) -> Option<f64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The soft limit of `/proc/<pid>/limits` row `name`; `unlimited` is `u64::MAX`, as the
/// Go client reports it.
fn parse_limit(limits: &str, name: &str) -> Option<f64> {
    let rest = limits.lines().find_map(|l| l.strip_prefix(name))?;
    match rest.split_whitespace().next()? {
        "unlimited" => Some(u64::MAX as f64),
        soft => soft.parse().ok(),
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn sample() -> Option<Sample> {
    let (cpu_seconds, started_ticks, virtual_bytes) = parse_stat(&read("/proc/self/stat")?)?;
    let limits = read("/proc/self/limits")?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
    Some(Sample {
        cpu_seconds,
        virtual_bytes,
        resident_bytes: parse_rss(&read("/proc/self/status")?)?,
        start_time: parse_boot_time(&read("/proc/stat")?)? + started_ticks,
        open_fds: open_fds as f64,
        max_fds: parse_limit(&limits, "Max open files")?,
        max_virtual_bytes: parse_limit(&limits, "Max address space")?,
    })
}

/// Reads `/proc` on every scrape.
#[derive(Debug, Default)]
pub(super) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Without a readable `/proc` (not Linux) there is nothing to export.
        let Some(s) = sample() else {
            return Ok(());
        };
        // The counter is named without `_total`: the encoder appends it.
        encoder
            .encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                MetricType::Counter,
            )?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, f64>(
                &s.cpu_seconds,
                None,
            )?;
        let gauges = [
            (
                "process_open_fds",
                "Number of open file descriptors.",
                s.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                s.max_fds,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                s.virtual_bytes,
            ),
            (
                "process_virtual_memory_max_bytes",
                "Maximum amount of virtual memory available in bytes.",
                s.max_virtual_bytes,
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                s.resident_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                s.start_time,
            ),
        ];
        for (name, help, value) in gauges {
            encoder
                .encode_descriptor(name, help, None, MetricType::Gauge)?
                .encode_gauge(&value)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_is_split_after_the_command_name_even_when_it_holds_parentheses() {
        let stat = "4242 (inrun (x) y) S 1 4242 4242 0 -1 4194560 1500 0 0 0 250 50 0 0 20 0 9 0 \
                    12345 1073741824 20000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        assert_eq!(parse_stat(stat), Some((3.0, 123.45, 1_073_741_824.0)));
    }

    #[test]
    fn limits_rss_and_boot_time_are_read_from_their_files() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max address space         unlimited            unlimited            bytes     \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_limit(limits, "Max open files"), Some(1024.0));
        assert_eq!(
            parse_limit(limits, "Max address space"),
            Some(18_446_744_073_709_551_615.0)
        );
        assert_eq!(
            parse_rss("Name:\tinrun\nVmRSS:\t   2048 kB\n"),
            Some(2_097_152.0)
        );
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\n"),
            Some(1_700_000_000.0)
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_sampled_with_plausible_values() {
        let s = sample().expect("/proc is readable on Linux");
        assert!(s.resident_bytes > 0.0 && s.virtual_bytes >= s.resident_bytes);
        assert!(s.open_fds >= 1.0 && s.open_fds <= s.max_fds);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        assert!(s.start_time <= now + 1.0 && s.start_time > now - 86_400.0 * 365.0);
    }
}
