//! LATENCY DOCTOR: Redis's human-readable report on the latency events,
//! with the advice Redis gives for the events cairn records (see
//! `latency`'s module doc for the mapping). The texts are Redis's, so tools
//! that scrape them keep working.

use std::fmt::Write as _;

use crate::server::Server;

/// Which pieces of advice the report ends with, in the order they print.
#[derive(Default)]
struct Advice {
    slowlog_enabled: bool,
    slowlog_tuning: bool,
    slowlog_inspect: bool,
    scheduler: bool,
    local_disk: bool,
    ssd: bool,
    data_writeback: bool,
    relax_fsync: bool,
    hz: bool,
    large_objects: bool,
    disable_thp: bool,
    /// How many Redis counts (some count more than once, and some are
    /// counted yet not printed), which decides the closing text.
    count: u32,
}

/// The report's text.
pub fn report(server: &Server) -> String {
    let events = super::latency::event_stats(server);
    let threshold = super::latency::threshold_ms(server);
    if events.is_empty() && threshold == 0 {
        return "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n".into();
    }
    let (slower_than, hz, always) = {
        let rt = server.runtime.read();
        (
            rt.int("slowlog-log-slower-than"),
            rt.int("hz"),
            server.shards.durability() == crate::config::Durability::Always,
        )
    };
    let mut out = String::new();
    let mut advice = Advice::default();
    for (n, e) in events.iter().enumerate() {
        if n == 0 {
            out.push_str("Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n");
        }
        let _ = write!(
            out,
            "{}. {}: {} latency spikes (average {}ms, mean deviation {}ms, period {:.2} sec). Worst all time event {}ms.",
            n + 1,
            e.name,
            e.samples,
            e.avg,
            e.mad,
            e.period as f64 / e.samples.max(1) as f64,
            e.max
        );
        match e.name {
            super::latency::COMMAND => {
                if slower_than < 0 {
                    advice.slowlog_enabled = true;
                    advice.count += 1;
                } else if slower_than / 1000 > threshold as i64 {
                    advice.slowlog_tuning = true;
                    advice.count += 1;
                }
                advice.slowlog_inspect = true;
                advice.large_objects = true;
                advice.count += 2;
            }
            super::latency::FAST_COMMAND => {
                advice.scheduler = true;
                advice.count += 1;
            }
            super::latency::WRITE_ALONE => {
                advice.local_disk = true;
                advice.data_writeback = true;
                advice.ssd = true;
                advice.count += 3;
            }
            super::latency::FSYNC_ALWAYS => {
                advice.relax_fsync = true;
                advice.count += 1;
            }
            super::latency::EXPIRE_CYCLE => {
                advice.hz = true;
                advice.large_objects = true;
                advice.count += 2;
            }
            _ => {}
        }
        out.push('\n');
    }
    if anon_huge_pages() > 0 {
        advice.disable_thp = true;
        advice.count += 1;
    }
    if events.is_empty() && advice.count == 0 {
        out.push_str("Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n");
    } else if !events.is_empty() && advice.count == 0 {
        out.push_str("\nWhile there are latency events logged, I'm not able to suggest any easy fix. Please use the Redis community to get some help, providing this report in your help request.\n");
    } else {
        out.push_str("\nI have a few advices for you:\n\n");
        let suggested = threshold * 1000;
        if advice.slowlog_enabled {
            let _ = writeln!(out, "- There are latency issues with potentially slow commands you are using. Try to enable the Slow Log Redis feature using the command 'CONFIG SET slowlog-log-slower-than {suggested}'. If the Slow log is disabled Redis is not able to log slow commands execution for you.");
        }
        if advice.slowlog_tuning {
            let _ = writeln!(out, "- Your current Slow Log configuration only logs events that are slower than your configured latency monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than {suggested}'.");
        }
        if advice.slowlog_inspect {
            out.push_str("- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://redis.io/commands/slowlog for more information.\n");
        }
        if advice.scheduler {
            out.push_str("- The system is slow to execute Redis code paths not containing system calls. This usually means the system does not provide Redis CPU time to run for long periods. You should try to:\n  1) Lower the system load.\n  2) Use a computer / VM just for Redis if you are running other software in the same system.\n  3) Check if you have a \"noisy neighbour\" problem.\n  4) Check with 'redis-cli --intrinsic-latency 100' what is the intrinsic latency in your system.\n  5) Check if the problem is allocator-related by recompiling Redis with MALLOC=libc, if you are using Jemalloc. However this may create fragmentation problems.\n");
        }
        if advice.local_disk {
            out.push_str("- It is strongly advised to use local disks for persistence, especially if you are using AOF. Remote disks provided by platform-as-a-service providers are known to be slow.\n");
        }
        if advice.ssd {
            out.push_str("- SSD disks are able to reduce fsync latency, and total time needed for snapshotting and AOF log rewriting (resulting in smaller memory usage and smaller final AOF rewrite buffer flushes). With extremely high write load SSD disks can be a good option. However Redis should perform reasonably with high load using normal disks. Use this advice as a last resort.\n");
        }
        if advice.data_writeback {
            out.push_str("- Mounting ext3/4 filesystems with data=writeback can provide a performance boost compared to data=ordered, however this mode of operation provides less guarantees, and sometimes it can happen that after a hard crash the AOF file will have a half-written command at the end and will require to be repaired before Redis restarts.\n");
        }
        if advice.relax_fsync && always {
            out.push_str("- Your fsync policy is set to 'always'. It is very hard to get good performances with such a setup, if possible try to relax the fsync policy to 'onesec'.\n");
        }
        if advice.hz && hz < 100 {
            out.push_str("- In order to make the Redis keys expiring process more incremental, try to set the 'hz' configuration parameter to 100 using 'CONFIG SET hz 100'.\n");
        }
        if advice.large_objects {
            out.push_str("- Deleting, expiring or evicting (because of maxmemory policy) large objects is a blocking operation. If you have very large objects that are often deleted, expired, or evicted, try to fragment those objects into multiple smaller objects.\n");
        }
        if advice.disable_thp {
            out.push_str("- I detected a non zero amount of anonymous huge pages used by your process. This creates very serious latency events in different conditions, especially when Redis is persisting on disk. To disable THP support use the command 'echo never > /sys/kernel/mm/transparent_hugepage/enabled', make sure to also add it into /etc/rc.local so that the command will be executed again after a reboot. Note that even if you have already disabled THP, you still need to restart the Redis process to get rid of the huge pages already created.\n");
        }
    }
    out
}

/// Anonymous huge pages of this process in kB (Linux; 0 if unknown), as
/// Redis checks them for its THP advice.
fn anon_huge_pages() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
