// hopperkit fused FP8 MoE: an optional per-CTA event trace of the two grouped GEMMs (profiling builds only).
//
// Built with -DHOPPERKIT_MOE_TRACE (CMake option HOPPERKIT_MOE_TRACE=ON), every CTA of the gate-up and of the
// down GEMM writes %globaltimer (ns, one clock for all SMs) at the events below into its row of a device buffer
// (gate-up rows first, then the down's), which the host reads back with hopperkit_moe_trace_read() (a C symbol
// of the library; scripts/moe_trace.py calls it through ctypes). Default builds compile none of it: the kernels
// and their arguments are unchanged.
#pragma once

// HK_MT_ONLY(code): the code in trace builds only (the GEMMs' and kernel 1's events); nothing in default builds.
#ifdef HOPPERKIT_MOE_TRACE
#define HK_MT_ONLY(...) __VA_ARGS__
#else
#define HK_MT_ONLY(...)
#endif

namespace hopperkit {
namespace moe {

constexpr int kMoeTraceSlots = 56;     // u64 per CTA
constexpr int kMoeTraceMaxCtas = 1024; // per GEMM
constexpr int kMoeTraceItems = 6;      // items per CTA with events of their own (the CTA's first ones)

enum MoeTraceEvent : int {
  kMtEntry = 0,        // entry (before barrier initialisation)
  kMtWaited = 1,       // after the grid dependency wait, or (swapped down waiting per tile) its decision
  kMtConsumersDone = 2,  // consumers (thread 0): after the last item (the gate-up's hand-off warp may still
                         // be merging a piece handed on before it)
  kMtSm = 3,           // %smid
  kMtItems = 4,        // items the CTA ran
  kMtProducerDone = 5, // producer (lane 0): after its last copy was issued
  kMtItemIssued = 8,   // + i: producer lane 0: item i's first stage issued (its tile ready, down per-tile wait)
  kMtItemStart = 14,   // + i: consumers (thread 0): item i begins (before its first stage is waited for; a
                       // claimed item (per-tensor swapped down, i >= 1): after, as it learns the item then)
  kMtItemKDone = 20,   // + i: consumers: item i's last stage consumed
  kMtItemStored = 26,  // + i: consumers: item i's results stored (after a split's merge, if it merged; the
                       // gate-up with the per-tile hand-off: after its tile_ready release; a split piece given
                       // to the gate-up's hand-off warp: once handed on)
  // the epilogue's steps (session 57), consumers (thread 0), or for a split piece given to the per-tensor swapped
  // gate-up's hand-off warp (session 58), that warp's lane 0 (arrived, act done):
  kMtItemArrived = 32,  // + i: a split piece's partial parked and its arrival atomic returned (split items only)
  kMtItemMerged = 38,   // + i: the last piece's sum of the parked partials loaded (the piece that merged only)
  kMtItemActDone = 44,  // + i: gate-up: the act codes stored and the consumers' barrier passed, before the
                        // tile_ready release (the per-tile hand-off only)
};
static_assert(kMtItemActDone + kMoeTraceItems <= kMoeTraceSlots, "trace slots");

// Kernel 1 (prep.cu, the one-CTA index build with its quantisation CTAs) records into the gate-up region's last
// row (a gate-up grid never reaches it: its grid is checked against kMoeTraceMaxCtas - 1 in fused_moe.cpp). The
// quantisation CTAs' slots hold the latest time any of them reached the event (atomicMax: the last call's, as
// the clock only grows); hopperkit_moe_trace_read(which = 2) returns this row. "The index CTA" is kernel 1's CTA 0:
// with the index built in chunks its first count CTA, with the GEMM index its resets. A call that runs no such CTA
// (HOPPERKIT_MOE_PREP_BOUND's kernel, an FP8 input: no quantisation CTAs) leaves an earlier call's times.
constexpr int kMoeTracePrepRow = kMoeTraceMaxCtas - 1;
enum MoePrepTraceEvent : int {
  kMpIndexEntry = 0,      // the index CTA's entry
  kMpIndexDone = 1,       // the index CTA's last store issued (its threads' barrier passed)
  kMpQuantEntryLast = 2,  // the last quantisation CTA's entry
  kMpQuantDoneLast = 3,   // the last quantisation CTA's stores issued
  kMpQuantEntryFirst = 4, // quantisation CTA 0's entry (the grid's second CTA: one of the first to start)
  kMpIndexCounted = 5,    // the index CTA: its entries' experts counted (the barrier after the count passed)
  kMpIndexScanned = 6,    // the index CTA: offsets and tile list written (the barrier after the scan passed)
};

}  // namespace moe
}  // namespace hopperkit
