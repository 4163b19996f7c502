//! Giving the system back what a burst of streams (or of `/mcp` sessions)
//! freed.
//!
//! A thousand runs streamed at once allocate tens of MB (request and
//! response buffers, the model's streamed turns, frames). When they end the
//! memory is free, but glibc's allocator keeps it in its per-thread arenas:
//! it returns only the free space at the top of each heap, and a few live
//! allocations above a freed region pin it. So a server that has just
//! suspended 1,000 runs stays resident near its peak while it holds almost
//! nothing. Measured with `askloop-bench --hold 60 http-concurrent 1000`
//! (2026-12-03): 73.7 MB resident with the runs waiting, 56.9 MB after a
//! `malloc_trim(0)` called through gdb, of which the live heap was 26 MB
//! (heaptrack), mostly hyper's two 8 KB buffers per open connection.
//!
//! [`Streams`] counts the open streams, and the open `/mcp` sessions with
//! them (see `docs/reliability.md` for a flood of sessions measured). After
//! a burst (at least [`BURST`]
//! open at once) it asks the allocator to give the free pages back, on a
//! blocking thread: each time the count falls to a quarter of the most open
//! since the last trim, so a server that is never idle still trims, and
//! once more when the last stream ends. Round trips one after another never
//! trim: the count never reaches a burst. A trim briefly locks each arena
//! in turn, which is why it waits for a burst to be mostly over rather than
//! running per stream.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The fewest streams open at once that count as a burst worth trimming
/// after.
pub(crate) const BURST: usize = 64;

/// The streams open now and the most open since the last trim.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    open: AtomicUsize,
    most: AtomicUsize,
    /// A burst happened that the last stream's end has not trimmed after.
    burst: AtomicBool,
    trims: AtomicUsize,
}

impl Streams {
    /// Counts a stream as open until the returned guard is dropped.
    pub(crate) fn open(self: &Arc<Self>) -> OpenStream {
        let now = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        self.most.fetch_max(now, Ordering::Relaxed);
        if now == BURST {
            self.burst.store(true, Ordering::Relaxed);
        }
        OpenStream(Arc::clone(self))
    }

    /// How many trims were started.
    #[cfg(test)]
    pub(crate) fn trims(&self) -> usize {
        self.trims.load(Ordering::Relaxed)
    }

    /// A stream ended with `now` still open: whether to trim (see the
    /// module's documentation). Of several streams ending at once, one
    /// wins the compare-and-set and trims; the peak starts again from now.
    fn closed(&self, now: usize) -> bool {
        let trim = if now == 0 && self.burst.swap(false, Ordering::Relaxed) {
            self.most.store(0, Ordering::Relaxed);
            true
        } else {
            let most = self.most.load(Ordering::Relaxed);
            most >= BURST
                && now <= most / 4
                && self
                    .most
                    .compare_exchange(most, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
        };
        if trim {
            self.trims.fetch_add(1, Ordering::Relaxed);
        }
        trim
    }
}

/// An open stream, counted until dropped.
#[derive(Debug)]
pub(crate) struct OpenStream(Arc<Streams>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        let now = self.0.open.fetch_sub(1, Ordering::Relaxed) - 1;
        if self.0.closed(now) {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(release_free_memory)),
                Err(_) => release_free_memory(),
            }
        }
    }
}

/// Asks glibc to return the free pages of every arena to the system.
/// Elsewhere (musl, macOS) nothing: those allocators have no such call.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn release_free_memory() {
    // SAFETY: malloc_trim takes no pointers and touches only glibc's own
    // free lists, under the locks every allocator call takes.
    let released = unsafe { libc::malloc_trim(0) } == 1;
    tracing::debug!(released, "gave the system back the memory a burst of streams freed");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_memory() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_one_after_another_never_trim() {
        let streams = Arc::new(Streams::default());
        for _ in 0..1000 {
            drop(streams.open());
        }
        assert_eq!(streams.trims(), 0);
    }

    #[test]
    fn a_burst_trims_at_each_quarter_of_its_peak_and_when_the_last_stream_ends() {
        let streams = Arc::new(Streams::default());
        let mut open: Vec<OpenStream> = (0..1000).map(|_| streams.open()).collect();
        // 1,000 open; down to 251 (more than a quarter) nothing happens.
        open.truncate(251);
        assert_eq!(streams.trims(), 0);
        open.truncate(250);
        assert_eq!(streams.trims(), 1);
        // The peak starts again from 250: a quarter of it is 62.
        open.truncate(63);
        assert_eq!(streams.trims(), 1);
        open.truncate(62);
        assert_eq!(streams.trims(), 2);
        // 62 is short of a burst: no more quarters, but the last stream's
        // end trims once more.
        open.truncate(1);
        assert_eq!(streams.trims(), 2);
        open.clear();
        assert_eq!(streams.trims(), 3);
        // Quiet again: a stream on its own does not trim.
        drop(streams.open());
        assert_eq!(streams.trims(), 3);
    }

    #[test]
    fn a_server_that_is_never_idle_still_trims_after_each_burst() {
        let streams = Arc::new(Streams::default());
        let _always: Vec<OpenStream> = (0..10).map(|_| streams.open()).collect();
        let burst: Vec<OpenStream> = (0..BURST).map(|_| streams.open()).collect();
        drop(burst);
        assert_eq!(streams.trims(), 1);
        let burst: Vec<OpenStream> = (0..BURST).map(|_| streams.open()).collect();
        drop(burst);
        assert_eq!(streams.trims(), 2);
    }

    #[test]
    fn a_burst_just_short_of_the_threshold_does_not_trim() {
        let streams = Arc::new(Streams::default());
        let open: Vec<OpenStream> = (0..BURST - 1).map(|_| streams.open()).collect();
        drop(open);
        assert_eq!(streams.trims(), 0);
    }
}
