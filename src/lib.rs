//! cairn: a disk-backed, Redis-compatible server.
//!
//! # Layout
//! * [`acl`] — ACL users, their rules, the permission check, the ACL LOG.
//! * [`config`] — config.toml fields, defaults, command-line overrides.
//! * [`protocol`] — RESP decoding (redis-protocol + inline) and reply encoding.
//! * [`net`] — listener, connection tasks, per-client session state.
//! * [`command`] — the command table, argument helpers, COMMAND INFO/DOCS.
//! * [`families`] — command implementations: parsing on the connection,
//!   shard-side closures for the data.
//! * [`storage`] — the on-disk encoding on redb and the keyspace rules.
//! * [`shard`] — shard actors (group commit), reaper, multi-shard coordinator.
//! * [`cluster`] — key slots and slot-to-shard mapping.
//! * [`pubsub`] — channel, pattern and shard-channel subscribers, message
//!   delivery to connections, output buffer limits.
//! * [`server`] — state shared by all connections.
//! * [`util`] — Redis-exact helpers: glob matching, number parsing and
//!   formatting, bit operations, LCS.
//! * [`logging`] — the server log: Redis's loglevel names, logfile, and
//!   CONFIG SET loglevel while running.
//! * [`run`] — starting and stopping a server (used by main and the tests).
//! * [`scripting`] — the Lua engine behind EVAL and FUNCTION: sandbox, `redis`
//!   API, reply conversions, cjson/cmsgpack/bit/struct.

/// mimalloc instead of glibc's malloc: every op allocates row keys and
/// values and redb allocates its pages; glibc's free-list upkeep
/// (consolidating, unlinking chunks) took ~20% of a shard thread under RPUSH.
#[global_allocator]
static GLOBAL: Allocator = Allocator;

/// mimalloc, through its plain entry points wherever they give the
/// alignment asked for, which is every layout a server makes.
///
/// The `mimalloc` crate sends every request to `mi_malloc_aligned`. Its
/// fast path serves only from a size class whose page has a free block
/// at hand; whenever the page has none (its frees are still on the
/// thread-free list) the request goes to the aligned fallback, which for
/// most sizes over-allocates from the next size class instead of
/// refilling the page. Under EVALSHA that fallback took about 20
/// requests per command. `mi_malloc` refills the page as it should.
///
/// Every mimalloc block is aligned to 8 bytes, and to 16 (its largest
/// guaranteed alignment) from 16 bytes up: the size classes are
/// multiples of 16 from there. A layout aligned to 16 or less therefore
/// gets `mi_malloc` of its size rounded up to its alignment (Lua asks
/// for 16 on sizes that are mostly not multiples of it); a larger
/// alignment still takes the aligned API.
struct Allocator;

/// The largest alignment `mi_malloc` gives every block of at least that
/// size (mimalloc's `MI_MAX_ALIGN_SIZE` on 64-bit targets).
const PLAIN_ALIGN: usize = 16;

impl Allocator {
    /// `size` rounded up to `align` (a power of two).
    fn rounded(size: usize, align: usize) -> usize {
        (size + align - 1) & !(align - 1)
    }

    /// A new block for `layout`: from `plain` (given the size rounded up
    /// to the alignment) where that gives the alignment, else from
    /// `aligned` (given the size and the alignment).
    #[inline]
    unsafe fn block(layout: std::alloc::Layout, plain: PlainFn, aligned: AlignedFn) -> *mut u8 {
        let (size, align) = (layout.size(), layout.align());
        if align <= PLAIN_ALIGN {
            let p: *mut u8 = plain(Allocator::rounded(size, align)).cast();
            // Every test run checks the promise on every block it makes.
            debug_assert!((p as usize).is_multiple_of(align));
            p
        } else {
            aligned(size, align).cast()
        }
    }
}

/// mimalloc's `mi_malloc` or `mi_zalloc`.
type PlainFn = unsafe extern "C" fn(usize) -> *mut std::ffi::c_void;

/// mimalloc's `mi_malloc_aligned` or `mi_zalloc_aligned`.
type AlignedFn = unsafe extern "C" fn(usize, usize) -> *mut std::ffi::c_void;

// SAFETY: a layout aligned to `PLAIN_ALIGN` or less is served by the plain
// API with a size that is a multiple of its alignment, which mimalloc
// aligns to at least that; any other by the aligned API. Each block, from
// either, is freed by pointer with `mi_free`.
unsafe impl std::alloc::GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_malloc, mi_malloc_aligned};
        Allocator::block(layout, mi_malloc, mi_malloc_aligned)
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_zalloc, mi_zalloc_aligned};
        Allocator::block(layout, mi_zalloc, mi_zalloc_aligned)
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        libmimalloc_sys::mi_free(ptr.cast());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let align = layout.align();
        if align <= PLAIN_ALIGN {
            let p: *mut u8 =
                libmimalloc_sys::mi_realloc(ptr.cast(), Allocator::rounded(new_size, align)).cast();
            debug_assert!((p as usize).is_multiple_of(align));
            p
        } else {
            libmimalloc_sys::mi_realloc_aligned(ptr.cast(), new_size, align).cast()
        }
    }
}

pub mod acl;
pub mod cluster;
pub mod command;
pub mod config;
pub mod families;
pub mod logging;
pub mod net;
pub mod protocol;
pub mod pubsub;
pub mod rdb;
pub mod replication;
pub mod run;
pub mod scripting;
pub mod server;
pub mod shard;
pub mod storage;
pub mod util;

#[cfg(test)]
mod tests {
    use std::alloc::{alloc, alloc_zeroed, dealloc, realloc, Layout};

    /// Every block is aligned as its layout asks, whatever the size
    /// (Lua's 16-byte alignment with sizes of no particular multiple
    /// included), zeroed where asked, and keeps its bytes when it grows.
    #[test]
    fn the_allocator_keeps_alignment_and_contents() {
        for align in [1, 8, 16, 64, 4096] {
            for size in [1, 7, 8, 15, 17, 24, 40, 100, 1000, 70_000] {
                let layout = Layout::from_size_align(size, align).unwrap();
                let grown = Layout::from_size_align(size * 3 + 1, align).unwrap();
                let aligned = |p: *mut u8| !p.is_null() && (p as usize).is_multiple_of(align);
                // SAFETY: non-zero sizes; each block is freed once, with
                // the layout it has at that point.
                unsafe {
                    let p = alloc(layout);
                    assert!(aligned(p), "{size}/{align}");
                    p.write_bytes(7, size);
                    let q = realloc(p, layout, grown.size());
                    assert!(aligned(q), "{size}/{align}");
                    assert!(std::slice::from_raw_parts(q, size).iter().all(|&b| b == 7));
                    dealloc(q, grown);
                    let z = alloc_zeroed(layout);
                    assert!(aligned(z), "{size}/{align}");
                    assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                    dealloc(z, layout);
                }
            }
        }
        // Many blocks of one odd size, freed and made again, as Lua's
        // strings come and go: every one aligned.
        let layout = Layout::from_size_align(40, 16).unwrap();
        // SAFETY: each block is freed once with its layout.
        unsafe {
            let mut blocks: Vec<*mut u8> = (0..5000).map(|_| alloc(layout)).collect();
            for p in blocks.iter_mut().step_by(2) {
                dealloc(*p, layout);
                *p = alloc(layout);
            }
            assert!(blocks.iter().all(|&p| (p as usize).is_multiple_of(16)));
            for p in blocks {
                dealloc(p, layout);
            }
        }
    }
}
