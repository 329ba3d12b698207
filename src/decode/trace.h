// hopperkit decode attention: an optional per-CTA event trace (profiling builds only).
//
// Built with -DHOPPERKIT_DECODE_TRACE (CMake option HOPPERKIT_DECODE_TRACE=ON), every attention CTA writes the
// SM cycle counter at the events below into its row of a device buffer, which the host reads back with
// hopperkit_decode_trace_read() (a C symbol of the library; scripts/decode_trace.py calls it through ctypes).
// Default builds compile none of it: the kernels and their arguments are unchanged.
#pragma once

namespace hopperkit {
namespace decode {

constexpr int kTraceSlots = 56;   // u64 per CTA
constexpr int kTraceMaxCtas = 2048;

enum TraceEvent : int {
  kTrEntryTimer = 0,    // %globaltimer at entry (ns; the only cross-SM clock)
  kTrEntry = 1,         // cycles: entry (after barrier init)
  kTrDepWait = 2,       // after griddepcontrol.wait
  kTrFirstMeta = 3,     // producer: first chunk's metadata in registers (before its query copies)
  kTrFirstTma = 4,      // producer: first KV TMA issued
  kTrLastTma = 5,       // producer: last KV TMA issued
  kTrFirstQ = 6,        // consumers (thread 0): first query slot ready
  kTrFirstKv = 7,       // consumers: first KV stage landed
  kTrLastTile = 8,      // consumers: last chunk's last tile consumed
  kTrEpilogue = 9,      // consumers: last chunk's output / partial stored
  kTrMergeStart = 10,   // consumers: last merge this CTA ran began (0: none)
  kTrExit = 11,         // consumers: done
  kTrExitTimer = 12,    // %globaltimer at kTrExit
  kTrCounts = 13,       // chunks | merges << 16 | split handshakes << 32
  kTrSm = 14,           // %smid
  kTrHandshake = 15,    // consumers: last split handshake (arrive_last) returned
  // the first kTrChunks chunks of a CTA, one slot per chunk c:
  kTrChunkQ = 16,       // + c: consumers: chunk c's query slot ready
  kTrChunkKv = 20,      // + c: consumers: chunk c's first KV stage landed
  kTrChunkTiles = 24,   // + c: consumers: chunk c's last tile consumed
  kTrChunkEpi = 28,     // + c: consumers: chunk c's output / partial stored
  kTrChunkTma = 32,     // + c: producer: chunk c's first KV TMA issued
  kTrChunkMeta = 36,    // + c: producer: chunk c's metadata in registers (before its query copies)
  kTrChunkEpiBar = 40,  // + c: consumers (token-group variants): chunk c's partial results in shared memory,
                        //      after the barrier that precedes combining them
  kTrWarpTiles = 44,    // + w: consumer warp w's lane 0: chunk 1's last tile consumed (warp skew)
  // inside merge_slots, thread 0, for the CTA's first merge (+0) and its last later one (+1):
  kTrMergeIn = 48,      // + i: merge_slots entered (after one global read of this slot, which picks i)
  kTrMergeLoaded = 50,  // + i: its first partials' loads returned (their maximum log2-sum-exp computed)
  kTrMergeOut = 52,     // + i: its stores issued, returning
  kTrMergeNext = 54,    // + 0: after a group merge, the arrival on the pair's group counter returned; in the
                        //      one-level sliced merge (merge_slice), the wait for the pair's last arrival returned
};
constexpr int kTrChunks = 4;

}  // namespace decode
}  // namespace hopperkit
