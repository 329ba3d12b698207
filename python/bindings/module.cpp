// hopperkit Python binding (nanobind over DLPack): turns arrays into the core's params structs.
// No torch here: the Python package passes torch tensors, nanobind imports them through DLPack.
// FP8 tensors arrive viewed as uint8 with their dtype given separately (DLPack float8 support varies).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <optional>
#include <type_traits>

#include "hopperkit/build_info.h"
#include "hopperkit/decode/attention.h"
#include "hopperkit/decode/plan.h"
#include "hopperkit/dtype.h"
#include "hopperkit/error.h"
#include "hopperkit/moe/moe.h"
#include "hopperkit/prologue/prologue.h"
#include "moe/workspace_layout.h"

namespace nb = nanobind;
using namespace hopperkit;
using Array = nb::ndarray<nb::ro>;

namespace {

DType dl_to_dtype(const nb::dlpack::dtype& d) {
  using C = nb::dlpack::dtype_code;
  if (d.code == static_cast<uint8_t>(C::Bfloat) && d.bits == 16) return DType::kBF16;
  if (d.code == static_cast<uint8_t>(C::Float) && d.bits == 16) return DType::kF16;
  if (d.code == static_cast<uint8_t>(C::Float) && d.bits == 32) return DType::kF32;
  if (d.code == static_cast<uint8_t>(C::Int) && d.bits == 32) return DType::kInt32;
  if (d.code == static_cast<uint8_t>(C::Int) && d.bits == 64) return DType::kInt64;
  if (d.code == static_cast<uint8_t>(C::UInt) && d.bits == 8) return DType::kUInt8;
  HK_CHECK(kDtype, false, "tensor", "bfloat16, float16, float32, int32, int64 or uint8 (fp8 as a uint8 view)",
           "DLPack code " + std::to_string(d.code) + " bits " + std::to_string(d.bits));
  return DType::kUInt8;
}

// `as` overrides the element type of a uint8 view (fp8).
TensorDesc desc(const Array& a, std::optional<DType> as = std::nullopt) {
  TensorDesc t;
  t.data = a.data();
  t.dtype = dl_to_dtype(a.dtype());
  if (as && t.dtype == DType::kUInt8 && *as == DType::kFP8E4M3) t.dtype = DType::kFP8E4M3;
  t.device_type = a.device_type();
  t.device_id = a.device_id();
  for (size_t i = 0; i < a.ndim(); ++i) {
    t.shape.push_back(static_cast<int64_t>(a.shape(i)));
    t.strides.push_back(static_cast<int64_t>(a.stride(i)));
  }
  return t;
}

// Plan config and launch travel through the torch op as one int list:
// [max_batch, num_q_heads, num_kv_heads, max_q_len, kv_dtype, mode, max_ctas, sm_ctas,
//  grid_ctas, static_splits, batch, block_size, long_pair_ctas, max_chunks_per_cta, min_tiles_per_cta,
//  align_window_div, long_pair_rule, slice_free]
constexpr size_t kCfgInts = 18;

decode::DecodePlanConfig cfg_from(const std::vector<int64_t>& v, decode::DecodePlanLaunch* launch = nullptr) {
  HK_CHECK(kShape, v.size() == kCfgInts, "plan_cfg", std::to_string(kCfgInts) + " integers", v.size());
  decode::DecodePlanConfig c;
  c.max_batch = static_cast<int>(v[0]);
  c.num_q_heads = static_cast<int>(v[1]);
  c.num_kv_heads = static_cast<int>(v[2]);
  c.max_q_len = static_cast<int>(v[3]);
  c.kv_dtype = static_cast<DType>(v[4]);
  c.mode = static_cast<decode::PlanMode>(v[5]);
  c.max_ctas = static_cast<int>(v[6]);
  c.sm_ctas = static_cast<int>(v[7]);
  c.long_pair_ctas = static_cast<int>(v[12]);
  c.max_chunks_per_cta = static_cast<int>(v[13]);
  c.min_tiles_per_cta = static_cast<int>(v[14]);
  c.align_window_div = static_cast<int>(v[15]);
  c.long_pair_rule = static_cast<int>(v[16]);
  HK_CHECK(kValue, c.long_pair_ctas >= 0 && c.long_pair_ctas <= c.max_ctas, "plan_cfg",
           "long_pair_ctas 0.." + std::to_string(c.max_ctas), c.long_pair_ctas);
  HK_CHECK(kValue, v[13] >= 0 && v[13] <= decode::kMaxChunksLimit, "plan_cfg",
           "max_chunks_per_cta 0.." + std::to_string(decode::kMaxChunksLimit), v[13]);
  HK_CHECK(kValue, v[14] >= 1 && v[14] <= decode::kMaxMinTilesPerCta, "plan_cfg",
           "min_tiles_per_cta 1.." + std::to_string(decode::kMaxMinTilesPerCta), v[14]);
  HK_CHECK(kValue, v[15] >= 0 && v[15] <= decode::kMaxAlignWindowDiv, "plan_cfg",
           "align_window_div 0.." + std::to_string(decode::kMaxAlignWindowDiv), v[15]);
  HK_CHECK(kValue, v[16] >= 0 && v[16] <= decode::kLongPairRuleRounds, "plan_cfg",
           "long_pair_rule 0.." + std::to_string(decode::kLongPairRuleRounds), v[16]);
  if (launch) {
    launch->grid_ctas = static_cast<int>(v[8]);
    launch->static_splits = static_cast<int>(v[9]);
    launch->batch = static_cast<int>(v[10]);
    launch->block_size = static_cast<int>(v[11]);
    launch->slice_free = v[17] != 0 ? 1 : 0;
  }
  return c;
}

std::vector<int64_t> cfg_to(const decode::DecodePlanConfig& c, const decode::DecodePlanLaunch& l) {
  return {c.max_batch, c.num_q_heads, c.num_kv_heads, c.max_q_len, static_cast<int64_t>(c.kv_dtype),
          static_cast<int64_t>(c.mode), c.max_ctas, c.sm_ctas, l.grid_ctas, l.static_splits, l.batch,
          l.block_size, c.long_pair_ctas, c.max_chunks_per_cta, c.min_tiles_per_cta, c.align_window_div,
          c.long_pair_rule, l.slice_free};
}

DType dtype_from_code(int64_t code, const char* arg) {
  HK_CHECK(kDtype, code == static_cast<int64_t>(DType::kBF16) || code == static_cast<int64_t>(DType::kFP8E4M3), arg,
           "bfloat16 or float8_e4m3fn", code);
  return static_cast<DType>(code);
}

cudaStream_t stream_of(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

// An optional one-element fp32 tensor on `dev` (a per-tensor scale): its pointer, or null when absent.
const float* scale_ptr(const std::optional<Array>& a, const char* name, int dev) {
  if (!a) return nullptr;
  const TensorDesc t = desc(*a);
  check::cuda_device(t, name, dev);
  check::dtype(t, name, DType::kF32);
  int64_t n = 1;
  for (int64_t x : t.shape) n *= x;
  HK_CHECK(kShape, n == 1, name, "a one-element float32 tensor", "shape " + shape_str(t.shape));
  return static_cast<const float*>(t.data);
}

// Every binding returns (result, error): error is None or (kind, arg, expected, actual, message), which the
// Python layer raises as the matching typed exception. Core errors are caught right where the core is called
// and never travel through the binding library's own exception machinery.
template <typename R, typename... Args>
auto guarded(R (*f)(Args...)) {
  return [f](Args... args) -> nb::object {
    try {
      if constexpr (std::is_void_v<R>) {
        f(args...);
        return nb::make_tuple(nb::none(), nb::none());
      } else {
        return nb::make_tuple(nb::cast(f(args...)), nb::none());
      }
    } catch (const Error& e) {
      return nb::make_tuple(nb::none(), nb::make_tuple(std::string(error_kind_name(e.kind())), e.arg(),
                                                       e.expected(), e.actual(), std::string(e.what())));
    }
  };
}

std::vector<int64_t> make_config(int max_batch, int num_q_heads, int num_kv_heads, int64_t kv_dtype, int max_q_len,
                                 int mode, int device, int sm_ctas) {
  const DType kv = dtype_from_code(kv_dtype, "kv_dtype");
  decode::DecodePlanConfig c =
      sm_ctas > 0 ? decode::make_decode_plan_config_for(max_batch, num_q_heads, num_kv_heads, kv, max_q_len,
                                                        static_cast<decode::PlanMode>(mode), sm_ctas)
                  : decode::make_decode_plan_config(max_batch, num_q_heads, num_kv_heads, kv, max_q_len,
                                                    static_cast<decode::PlanMode>(mode), device);
  return cfg_to(c, decode::DecodePlanLaunch{});
}

int64_t workspace_bytes(const std::vector<int64_t>& cfg) {
  return static_cast<int64_t>(decode::decode_plan_layout(cfg_from(cfg)).total_bytes);
}

nb::dict plan_layout(const std::vector<int64_t>& cfg) {
  const decode::DecodePlanLayout l = decode::decode_plan_layout(cfg_from(cfg));
  nb::dict d;
  d["header"] = l.header;
  d["pair_tile_start"] = l.pair_tile_start;
  d["pair_first_slot"] = l.pair_first_slot;
  d["pair_num_pieces"] = l.pair_num_pieces;
  d["cta_tile_start"] = l.cta_tile_start;
  d["cta_first_pair"] = l.cta_first_pair;
  d["empty_pairs"] = l.empty_pairs;
  d["merge_counters"] = l.merge_counters;
  d["slot_counters"] = l.slot_counters;
  d["sm_claims"] = l.sm_claims;
  d["partial_o"] = l.partial_o;
  d["partial_lse"] = l.partial_lse;
  d["total_bytes"] = l.total_bytes;
  return d;
}

std::vector<int64_t> plan_update(const std::vector<int64_t>& cfg, const Array& workspace, const Array& seq_lens,
                                 int block_size, int max_blocks_per_seq, int max_seq_len, uintptr_t stream) {
  decode::DecodePlanParams p;
  p.config = cfg_from(cfg);
  const TensorDesc ws = desc(workspace), sl = desc(seq_lens);
  check::cuda_device(ws, "workspace", ws.device_id);
  check::cuda_device(sl, "seq_lens", ws.device_id);
  check::dtype(ws, "workspace", DType::kUInt8);
  check::dtype(sl, "seq_lens", DType::kInt32);
  check::rank(sl, "seq_lens", 1, "[batch]");
  check::contiguous(sl, "seq_lens");
  check::contiguous(ws, "workspace");
  p.workspace = const_cast<void*>(ws.data);
  p.workspace_bytes = static_cast<size_t>(ws.shape.empty() ? 0 : ws.shape[0]);
  p.seq_lens = static_cast<const int32_t*>(sl.data);
  p.batch = static_cast<int>(sl.shape[0]);
  p.block_size = block_size;
  p.max_blocks_per_seq = max_blocks_per_seq;
  p.max_seq_len = max_seq_len;
  p.stream = stream_of(stream);
  const decode::DecodePlanLaunch l = decode::decode_plan(p);
  return cfg_to(p.config, l);
}

std::vector<int64_t> plan_launch_info(const std::vector<int64_t>& cfg, int batch, int block_size, int max_seq_len) {
  const decode::DecodePlanConfig c = cfg_from(cfg);
  HK_CHECK(kValue, batch >= 0 && batch <= c.max_batch, "seq_lens", "batch 0.." + std::to_string(c.max_batch), batch);
  HK_CHECK(kValue, max_seq_len >= 0, "max_seq_len", ">= 0", max_seq_len);  // (before the plan's cfg changes)
  return cfg_to(c, decode::decode_plan_launch_info(c, batch, block_size, max_seq_len));
}

nb::bytes plan_cpu(const std::vector<int64_t>& cfg, const std::vector<int32_t>& seq_lens, int block_size,
                   int max_blocks_per_seq, int max_seq_len) {
  const decode::DecodePlanConfig c = cfg_from(cfg);
  const size_t bytes = decode::decode_plan_layout(c).total_bytes;
  std::string buf(bytes, '\0');
  decode::decode_plan_cpu(c, seq_lens.data(), static_cast<int>(seq_lens.size()), block_size, max_blocks_per_seq,
                          max_seq_len, buf.data());
  return nb::bytes(buf.data(), buf.size());
}

int plan_read_errors(const std::vector<int64_t>& cfg, const Array& workspace, uintptr_t stream) {
  return decode::decode_plan_read_errors(cfg_from(cfg), workspace.data(), stream_of(stream));
}

void decode_attention(const Array& q, int64_t q_dtype, std::optional<Array> q_scale, const Array& k_cache,
                      const Array& v_cache, int64_t kv_dtype, std::optional<Array> k_scale,
                      std::optional<Array> v_scale, const Array& block_table, const Array& seq_lens,
                      std::optional<Array> query_start_loc, const Array& workspace, const Array& out,
                      std::optional<Array> lse, const std::vector<int64_t>& cfg, int max_q_len, double softmax_scale,
                      uintptr_t stream) {
  decode::DecodeAttentionParams p;
  p.plan_config = cfg_from(cfg, &p.plan_launch);
  const DType qd = dtype_from_code(q_dtype, "q");
  const DType kvd = dtype_from_code(kv_dtype, "k_cache");
  const TensorDesc tq = desc(q, qd), tk = desc(k_cache, kvd), tv = desc(v_cache, kvd), tbt = desc(block_table),
                   tsl = desc(seq_lens), tws = desc(workspace), to = desc(out);
  const int dev = tq.device_id;
  // ---- devices, dtypes, ranks
  check::cuda_device(tq, "q", dev);
  check::cuda_device(tk, "k_cache", dev);
  check::cuda_device(tv, "v_cache", dev);
  check::cuda_device(tbt, "block_table", dev);
  check::cuda_device(tsl, "seq_lens", dev);
  check::cuda_device(tws, "plan workspace", dev);
  check::cuda_device(to, "out", dev);
  check::dtype(tq, "q", qd);
  check::dtype(tk, "k_cache", kvd);
  check::dtype(tv, "v_cache", kvd);
  check::dtype(tbt, "block_table", DType::kInt32);
  check::dtype(tsl, "seq_lens", DType::kInt32);
  check::dtype(to, "out", DType::kBF16);
  check::rank(tq, "q", 3, "[num_tokens, num_q_heads, head_dim]");
  check::rank(tk, "k_cache", 4, "[num_blocks, block_size, num_kv_heads, head_dim]");
  check::rank(tv, "v_cache", 4, "[num_blocks, block_size, num_kv_heads, head_dim]");
  check::rank(tbt, "block_table", 2, "[batch, max_blocks_per_seq]");
  check::rank(tsl, "seq_lens", 1, "[batch]");
  check::rank(to, "out", 3, "[num_tokens, num_q_heads, head_dim]");
  const int64_t T = tq.shape[0], Hq = tq.shape[1], D = tq.shape[2];
  const int64_t NB = tk.shape[0], BS = tk.shape[1], Hkv = tk.shape[2];
  const int64_t B = tsl.shape[0];
  HK_CHECK(kUnsupported, D == decode::kHeadDim, "q", "head_dim 128", "head_dim " + std::to_string(D));
  for (int i = 0; i < 4; ++i) check::extent(tv, "v_cache", i, tk.shape[i], "k_cache's shape");
  check::extent(tk, "k_cache", 3, D, "[num_blocks, block_size, num_kv_heads, head_dim]");
  check::extent(tbt, "block_table", 0, B, "[batch, max_blocks_per_seq]");
  for (int i = 0; i < 3; ++i) check::extent(to, "out", i, tq.shape[i], "q's shape");
  check::last_dim_contiguous(tq, "q");
  check::last_dim_contiguous(tk, "k_cache");
  check::last_dim_contiguous(tv, "v_cache");
  check::last_dim_contiguous(tbt, "block_table");
  check::contiguous(tsl, "seq_lens");
  check::last_dim_contiguous(to, "out");
  p.q = tq.data;
  p.q_dtype = qd;
  p.q_stride_token = tq.strides[0];
  p.q_stride_head = tq.strides[1];
  if (q_scale) {
    const TensorDesc ts = desc(*q_scale);
    check::cuda_device(ts, "q_scale", dev);
    check::dtype(ts, "q_scale", DType::kF32);
    check::rank(ts, "q_scale", 2, "[num_tokens, num_q_heads]");
    check::extent(ts, "q_scale", 0, T, "[num_tokens, num_q_heads]");
    check::extent(ts, "q_scale", 1, Hq, "[num_tokens, num_q_heads]");
    check::contiguous(ts, "q_scale");
    p.q_scale = static_cast<const float*>(ts.data);
  }
  p.k_cache = tk.data;
  p.v_cache = tv.data;
  p.kv_dtype = kvd;
  p.k_stride_block = tk.strides[0];
  p.k_stride_token = tk.strides[1];
  p.k_stride_head = tk.strides[2];
  p.v_stride_block = tv.strides[0];
  p.v_stride_token = tv.strides[1];
  p.v_stride_head = tv.strides[2];
  p.num_blocks = static_cast<int>(NB);
  p.block_size = static_cast<int>(BS);
  p.k_scale = scale_ptr(k_scale, "k_scale", dev);
  p.v_scale = scale_ptr(v_scale, "v_scale", dev);
  p.block_table = static_cast<const int32_t*>(tbt.data);
  p.block_table_stride = tbt.strides[0];
  p.max_blocks_per_seq = static_cast<int>(tbt.shape[1]);
  p.seq_lens = static_cast<const int32_t*>(tsl.data);
  if (query_start_loc) {
    const TensorDesc tql = desc(*query_start_loc);
    check::cuda_device(tql, "query_start_loc", dev);
    check::dtype(tql, "query_start_loc", DType::kInt32);
    check::rank(tql, "query_start_loc", 1, "[batch + 1]");
    check::extent(tql, "query_start_loc", 0, B + 1, "[batch + 1]");
    check::contiguous(tql, "query_start_loc");
    p.query_start_loc = static_cast<const int32_t*>(tql.data);
  }
  p.batch = static_cast<int>(B);
  p.num_tokens = static_cast<int>(T);
  p.num_q_heads = static_cast<int>(Hq);
  p.num_kv_heads = static_cast<int>(Hkv);
  p.max_q_len = max_q_len;
  p.softmax_scale = static_cast<float>(softmax_scale);
  p.out = const_cast<void*>(to.data);
  p.out_stride_token = to.strides[0];
  p.out_stride_head = to.strides[1];
  if (lse) {
    const TensorDesc tl = desc(*lse);
    check::cuda_device(tl, "lse", dev);
    check::dtype(tl, "lse", DType::kF32);
    check::rank(tl, "lse", 2, "[num_tokens, num_q_heads]");
    check::extent(tl, "lse", 0, T, "[num_tokens, num_q_heads]");
    check::extent(tl, "lse", 1, Hq, "[num_tokens, num_q_heads]");
    check::last_dim_contiguous(tl, "lse");
    p.lse = static_cast<float*>(const_cast<void*>(tl.data));
    p.lse_stride_token = tl.strides[0];
  }
  const size_t need = decode::decode_plan_layout(p.plan_config).total_bytes;
  HK_CHECK(kShape, static_cast<size_t>(tws.shape.empty() ? 0 : tws.shape[0]) >= need, "plan workspace",
           std::to_string(need) + " bytes", tws.shape.empty() ? 0 : tws.shape[0]);
  p.plan_workspace = const_cast<void*>(tws.data);
  p.stream = stream_of(stream);
  decode::decode_attention(p);
}

void attention_prologue(const Array& qkv, const Array& positions, const Array& cos_sin, const Array& k_cache,
                        const Array& v_cache, int64_t kv_dtype, const Array& slot_mapping,
                        std::optional<Array> q_norm_weight, std::optional<Array> k_norm_weight,
                        std::optional<Array> k_scale, std::optional<Array> v_scale, const Array& q_out,
                        int64_t q_out_dtype, std::optional<Array> q_scale_out, const Array& error_count,
                        int num_q_heads, int num_kv_heads, int head_dim, double eps, bool norm_before_rope,
                        bool is_neox, uintptr_t stream) {
  prologue::PrologueParams p;
  HK_CHECK(kUnsupported, head_dim == 64 || head_dim == 128 || head_dim == 256, "head_dim", "64, 128 or 256",
           head_dim);  // first, so that an unsupported head dim is reported as such, not as a shape mismatch
  const DType kvd = dtype_from_code(kv_dtype, "k_cache");
  const DType qod = dtype_from_code(q_out_dtype, "q_out");
  const TensorDesc tx = desc(qkv), tp = desc(positions), tcs = desc(cos_sin), tk = desc(k_cache, kvd),
                   tv = desc(v_cache, kvd), ts = desc(slot_mapping), tq = desc(q_out, qod), te = desc(error_count);
  const int dev = tx.device_id;
  check::cuda_device(tx, "qkv", dev);
  check::cuda_device(tp, "positions", dev);
  check::cuda_device(tcs, "cos_sin_cache", dev);
  check::cuda_device(tk, "k_cache", dev);
  check::cuda_device(tv, "v_cache", dev);
  check::cuda_device(ts, "slot_mapping", dev);
  check::cuda_device(tq, "q_out", dev);
  check::cuda_device(te, "error_count", dev);
  check::dtype(tx, "qkv", DType::kBF16);
  check::dtype_one_of(tp, "positions", DType::kInt32, DType::kInt64);
  check::dtype_one_of(tcs, "cos_sin_cache", DType::kF32, DType::kBF16);
  check::dtype(tk, "k_cache", kvd);
  check::dtype(tv, "v_cache", kvd);
  check::dtype(ts, "slot_mapping", DType::kInt64);
  check::dtype(tq, "q_out", qod);
  check::dtype(te, "error_count", DType::kInt32);
  check::rank(tx, "qkv", 2, "[num_tokens, (num_q_heads + 2 * num_kv_heads) * head_dim]");
  check::rank(tp, "positions", 1, "[num_tokens]");
  check::rank(tcs, "cos_sin_cache", 2, "[max_position, rotary_dim]");
  check::rank(tk, "k_cache", 4, "[num_blocks, block_size, num_kv_heads, head_dim]");
  check::rank(tv, "v_cache", 4, "[num_blocks, block_size, num_kv_heads, head_dim]");
  check::rank(ts, "slot_mapping", 1, "[num_tokens]");
  check::rank(tq, "q_out", 3, "[num_tokens, num_q_heads, head_dim]");
  check::rank(te, "error_count", 1, "[2]");
  const int64_t T = tx.shape[0];
  const int64_t width = static_cast<int64_t>(num_q_heads + 2 * num_kv_heads) * head_dim;
  check::extent(tx, "qkv", 1, width, "[num_tokens, (num_q_heads + 2 * num_kv_heads) * head_dim]");
  check::extent(tp, "positions", 0, T, "[num_tokens]");
  check::extent(ts, "slot_mapping", 0, T, "[num_tokens]");
  check::extent(tk, "k_cache", 2, num_kv_heads, "[num_blocks, block_size, num_kv_heads, head_dim]");
  check::extent(tk, "k_cache", 3, head_dim, "[num_blocks, block_size, num_kv_heads, head_dim]");
  for (int i = 0; i < 4; ++i) check::extent(tv, "v_cache", i, tk.shape[i], "k_cache's shape");
  check::extent(tq, "q_out", 0, T, "[num_tokens, num_q_heads, head_dim]");
  check::extent(tq, "q_out", 1, num_q_heads, "[num_tokens, num_q_heads, head_dim]");
  check::extent(tq, "q_out", 2, head_dim, "[num_tokens, num_q_heads, head_dim]");
  check::extent(te, "error_count", 0, prologue::kNumPrologueErrors, "[2]");
  check::last_dim_contiguous(tx, "qkv");
  check::contiguous(tp, "positions");
  check::last_dim_contiguous(tcs, "cos_sin_cache");
  check::last_dim_contiguous(tk, "k_cache");
  check::last_dim_contiguous(tv, "v_cache");
  check::contiguous(ts, "slot_mapping");
  check::last_dim_contiguous(tq, "q_out");
  check::contiguous(te, "error_count");
  p.qkv = tx.data;
  p.qkv_stride_token = tx.strides[0];
  p.positions = tp.data;
  p.positions_dtype = tp.dtype;
  p.cos_sin = tcs.data;
  p.cos_sin_dtype = tcs.dtype;
  p.cos_sin_stride = tcs.strides[0];
  p.max_position = static_cast<int>(tcs.shape[0]);
  p.rotary_dim = static_cast<int>(tcs.shape[1]);
  p.is_neox = is_neox;
  DType wdt = DType::kBF16;
  auto weight = [&](const std::optional<Array>& w, const char* name) -> const void* {
    if (!w) return nullptr;
    const TensorDesc t = desc(*w);
    check::cuda_device(t, name, dev);
    check::dtype_one_of(t, name, DType::kBF16, DType::kF32);
    check::rank(t, name, 1, "[head_dim]");
    check::extent(t, name, 0, head_dim, "[head_dim]");
    check::contiguous(t, name);
    wdt = t.dtype;
    return t.data;
  };
  p.q_norm_weight = weight(q_norm_weight, "q_norm_weight");
  const DType qwdt = wdt;
  p.k_norm_weight = weight(k_norm_weight, "k_norm_weight");
  HK_CHECK(kDtype, !(q_norm_weight && k_norm_weight) || qwdt == wdt, "k_norm_weight",
           std::string("the dtype of q_norm_weight (") + dtype_name(qwdt) + ")", dtype_name(wdt));
  p.norm_weight_dtype = wdt;
  p.eps = static_cast<float>(eps);
  p.norm_before_rope = norm_before_rope;
  p.k_cache = const_cast<void*>(tk.data);
  p.v_cache = const_cast<void*>(tv.data);
  p.kv_dtype = kvd;
  p.k_stride_block = tk.strides[0], p.k_stride_token = tk.strides[1], p.k_stride_head = tk.strides[2];
  p.v_stride_block = tv.strides[0], p.v_stride_token = tv.strides[1], p.v_stride_head = tv.strides[2];
  p.num_blocks = static_cast<int>(tk.shape[0]);
  p.block_size = static_cast<int>(tk.shape[1]);
  p.k_scale = scale_ptr(k_scale, "k_scale", dev);
  p.v_scale = scale_ptr(v_scale, "v_scale", dev);
  p.slot_mapping = static_cast<const int64_t*>(ts.data);
  p.q_out = const_cast<void*>(tq.data);
  p.q_out_dtype = qod;
  p.q_out_stride_token = tq.strides[0];
  p.q_out_stride_head = tq.strides[1];
  if (q_scale_out) {
    const TensorDesc t = desc(*q_scale_out);
    check::cuda_device(t, "q_scale_out", dev);
    check::dtype(t, "q_scale_out", DType::kF32);
    check::rank(t, "q_scale_out", 2, "[num_tokens, num_q_heads]");
    check::extent(t, "q_scale_out", 0, T, "[num_tokens, num_q_heads]");
    check::extent(t, "q_scale_out", 1, num_q_heads, "[num_tokens, num_q_heads]");
    check::contiguous(t, "q_scale_out");
    p.q_scale_out = static_cast<float*>(const_cast<void*>(t.data));
  }
  p.error_count = static_cast<int*>(const_cast<void*>(te.data));
  p.num_tokens = static_cast<int>(T);
  p.num_q_heads = num_q_heads;
  p.num_kv_heads = num_kv_heads;
  p.head_dim = head_dim;
  p.stream = stream_of(stream);
  prologue::attention_prologue(p);
}

int64_t moe_workspace_bytes(int max_tokens, int top_k, int hidden, int intermediate, int num_local_experts,
                            bool block_scaled) {
  return static_cast<int64_t>(moe::moe_workspace_bytes(
      max_tokens, top_k, hidden, intermediate, num_local_experts,
      block_scaled ? moe::MoeScaling::kBlock128 : moe::MoeScaling::kPerTensor));
}

// The routing index's tile height fused_moe picks on the current device (moe::moe_tile_rows).
int moe_tile_rows(int num_tokens, int top_k, int num_global_experts, int num_local_experts, int hidden,
                  int intermediate, bool block_scaled) {
  return moe::moe_tile_rows(num_tokens, top_k, num_global_experts, num_local_experts, hidden, intermediate,
                            block_scaled ? moe::MoeScaling::kBlock128 : moe::MoeScaling::kPerTensor);
}

// Byte offsets of the workspace's buffers for a call of `tokens` tokens (tests read the routing index and the
// intermediate activations through them).
nb::dict moe_workspace_layout(int64_t tokens, int top_k, int hidden, int intermediate, int num_local_experts) {
  const moe::MoeWorkspaceLayout l = moe::moe_workspace_layout(tokens, top_k, hidden, intermediate, num_local_experts);
  nb::dict d;
  d["counters"] = l.counters;
  d["expert_offset"] = l.expert_offset;
  d["tiles"] = l.tiles;
  d["tiles_wide"] = l.tiles_wide;
  d["sorted_rows"] = l.sorted_rows;
  d["xq"] = l.xq;
  d["xq_scale"] = l.xq_scale;
  d["act"] = l.act;
  d["act_scale"] = l.act_scale;
  d["y"] = l.y;
  d["index_hist"] = l.index_hist;
  d["tile_ready"] = l.tile_ready;
  d["tiles_pair"] = l.tiles_pair;
  d["index_chunks"] = moe::index_ctas(tokens * top_k);  // rows of index_hist when the index is built in chunks
  d["total_bytes"] = l.total_bytes;
  return d;
}

// Scaling scheme from the weight scales' rank: [E] per-tensor, [E, rows / 128, cols / 128] block-wise.
void fused_moe(const Array& hidden, int64_t hidden_dtype, std::optional<Array> hidden_scale, const Array& topk_ids,
               const Array& topk_weights, std::optional<Array> expert_map, const Array& w13, const Array& w2,
               const Array& w13_scale, const Array& w2_scale, std::optional<Array> a13_scale,
               std::optional<Array> a2_scale, std::optional<Array> shared_output, const Array& out,
               const Array& workspace, uintptr_t stream) {
  const DType hd = dtype_from_code(hidden_dtype, "hidden");
  const TensorDesc tx = desc(hidden, hd), ti = desc(topk_ids), tw = desc(topk_weights),
                   t13 = desc(w13, DType::kFP8E4M3), t2 = desc(w2, DType::kFP8E4M3), ts13 = desc(w13_scale),
                   ts2 = desc(w2_scale), to = desc(out), tws = desc(workspace);
  const int dev = tx.device_id;
  const char* names[] = {"hidden", "topk_ids", "topk_weights", "w13", "w2", "w13_scale", "w2_scale", "out",
                         "workspace"};
  const TensorDesc* all[] = {&tx, &ti, &tw, &t13, &t2, &ts13, &ts2, &to, &tws};
  for (int i = 0; i < 9; ++i) check::cuda_device(*all[i], names[i], dev);
  check::dtype(tx, "hidden", hd);
  check::dtype(ti, "topk_ids", DType::kInt32);
  check::dtype(tw, "topk_weights", DType::kF32);
  check::dtype(t13, "w13", DType::kFP8E4M3);
  check::dtype(t2, "w2", DType::kFP8E4M3);
  check::dtype(ts13, "w13_scale", DType::kF32);
  check::dtype(ts2, "w2_scale", DType::kF32);
  check::dtype(to, "out", DType::kBF16);
  check::dtype(tws, "workspace", DType::kUInt8);
  check::rank(tx, "hidden", 2, "[num_tokens, hidden]");
  check::rank(ti, "topk_ids", 2, "[num_tokens, top_k]");
  check::rank(tw, "topk_weights", 2, "[num_tokens, top_k]");
  check::rank(t13, "w13", 3, "[num_local_experts, 2 * intermediate, hidden]");
  check::rank(t2, "w2", 3, "[num_local_experts, hidden, intermediate]");
  check::rank(to, "out", 2, "[num_tokens, hidden]");
  check::rank(tws, "workspace", 1, "[bytes]");
  const int64_t T = tx.shape[0], H = tx.shape[1], E = t13.shape[0], I2 = t13.shape[1];
  HK_CHECK(kShape, I2 % 2 == 0, "w13", "[num_local_experts, 2 * intermediate, hidden] (an even row count)",
           "shape " + shape_str(t13.shape));
  const int64_t I = I2 / 2;
  check::extent(t13, "w13", 2, H, "[num_local_experts, 2 * intermediate, hidden]");
  check::extent(t2, "w2", 0, E, "[num_local_experts, hidden, intermediate]");
  check::extent(t2, "w2", 1, H, "[num_local_experts, hidden, intermediate]");
  check::extent(t2, "w2", 2, I, "[num_local_experts, hidden, intermediate]");
  check::extent(ti, "topk_ids", 0, T, "[num_tokens, top_k]");
  check::extent(tw, "topk_weights", 0, T, "[num_tokens, top_k]");
  check::extent(tw, "topk_weights", 1, ti.shape[1], "[num_tokens, top_k] (topk_ids' top_k)");
  check::extent(to, "out", 0, T, "[num_tokens, hidden]");
  check::extent(to, "out", 1, H, "[num_tokens, hidden]");
  check::contiguous(ti, "topk_ids");
  check::contiguous(tw, "topk_weights");
  check::contiguous(t13, "w13");
  check::contiguous(t2, "w2");
  check::contiguous(ts13, "w13_scale");
  check::contiguous(ts2, "w2_scale");
  check::contiguous(tws, "workspace");
  check::last_dim_contiguous(tx, "hidden");
  check::last_dim_contiguous(to, "out");
  const bool block = ts13.ndim() == 3;
  // block-wise scales: [num_local_experts, weight rows / 128, K / 128]
  auto block_scales = [&](const TensorDesc& t, const char* name, int64_t rows, int64_t k, const char* layout) {
    const int64_t want[3] = {E, rows / moe::kScaleBlock, k / moe::kScaleBlock};
    for (int d = 0; d < 3; ++d) check::extent(t, name, d, want[d], layout);
  };
  if (block) {
    block_scales(ts13, "w13_scale", I2, H, "[num_local_experts, 2 * intermediate / 128, hidden / 128]");
    check::rank(ts2, "w2_scale", 3, "[num_local_experts, hidden / 128, intermediate / 128] (block-wise, as w13_scale)");
    block_scales(ts2, "w2_scale", H, I, "[num_local_experts, hidden / 128, intermediate / 128]");
  } else {
    check::rank(ts13, "w13_scale", 1, "[num_local_experts] (per-tensor) or [E, 2I / 128, hidden / 128] (block-wise)");
    check::extent(ts13, "w13_scale", 0, E, "[num_local_experts]");
    check::rank(ts2, "w2_scale", 1, "[num_local_experts] (per-tensor, as w13_scale)");
    check::extent(ts2, "w2_scale", 0, E, "[num_local_experts]");
  }
  moe::MoeParams p;
  p.scaling = block ? moe::MoeScaling::kBlock128 : moe::MoeScaling::kPerTensor;
  p.hidden = tx.data;
  p.hidden_dtype = hd;
  p.hidden_stride = tx.strides[0];
  if (hidden_scale) {
    const TensorDesc t = desc(*hidden_scale);
    check::cuda_device(t, "hidden_scale", dev);
    check::dtype(t, "hidden_scale", DType::kF32);
    check::contiguous(t, "hidden_scale");
    if (block) {
      check::rank(t, "hidden_scale", 2, "[num_tokens, hidden / 128]");
      check::extent(t, "hidden_scale", 0, T, "[num_tokens, hidden / 128]");
      check::extent(t, "hidden_scale", 1, H / moe::kScaleBlock, "[num_tokens, hidden / 128]");
      p.hidden_scale = static_cast<const float*>(t.data);
    } else {
      p.hidden_scale = scale_ptr(hidden_scale, "hidden_scale", dev);
    }
  }
  p.topk_ids = static_cast<const int32_t*>(ti.data);
  p.topk_weights = static_cast<const float*>(tw.data);
  p.top_k = static_cast<int>(ti.shape[1]);
  p.num_global_experts = static_cast<int>(E);
  if (expert_map) {
    const TensorDesc t = desc(*expert_map);
    check::cuda_device(t, "expert_map", dev);
    check::dtype(t, "expert_map", DType::kInt32);
    check::rank(t, "expert_map", 1, "[num_global_experts]");
    check::contiguous(t, "expert_map");
    p.expert_map = static_cast<const int32_t*>(t.data);
    p.num_global_experts = static_cast<int>(t.shape[0]);
  }
  p.w13 = t13.data;
  p.w2 = t2.data;
  p.w13_scale = static_cast<const float*>(ts13.data);
  p.w2_scale = static_cast<const float*>(ts2.data);
  p.a13_scale = scale_ptr(a13_scale, "a13_scale", dev);
  p.a2_scale = scale_ptr(a2_scale, "a2_scale", dev);
  if (shared_output) {
    const TensorDesc t = desc(*shared_output);
    check::cuda_device(t, "shared_output", dev);
    check::dtype(t, "shared_output", DType::kBF16);
    check::rank(t, "shared_output", 2, "[num_tokens, hidden]");
    check::extent(t, "shared_output", 0, T, "[num_tokens, hidden]");
    check::extent(t, "shared_output", 1, H, "[num_tokens, hidden]");
    check::last_dim_contiguous(t, "shared_output");
    p.shared_output = t.data;
    p.shared_stride = t.strides[0];
  }
  p.out = const_cast<void*>(to.data);
  p.out_stride = to.strides[0];
  p.workspace = const_cast<void*>(tws.data);
  p.workspace_bytes = static_cast<size_t>(tws.shape[0]);
  HK_CHECK(kValue, T <= moe::kMaxTokens, "hidden", "at most " + std::to_string(moe::kMaxTokens) + " tokens", T);
  p.num_tokens = static_cast<int>(T);
  p.hidden_size = static_cast<int>(H);
  p.intermediate = static_cast<int>(I);
  p.num_local_experts = static_cast<int>(E);
  p.stream = stream_of(stream);
  moe::fused_moe(p);
}

nb::dict build_info() {
  nb::dict d;
  d["version"] = HOPPERKIT_VERSION;
  d["git"] = HOPPERKIT_GIT_HASH;
  d["cuda_compiler"] = HOPPERKIT_CUDA_COMPILER;
  d["cuda_archs"] = HOPPERKIT_CUDA_ARCHS;
  d["build_type"] = HOPPERKIT_BUILD_TYPE;
  return d;
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "hopperkit core binding (framework-free: arrays via DLPack); every call returns (result, error)";
  m.def("build_info", &build_info);
  m.def("make_config", guarded(&make_config));
  m.def("workspace_bytes", guarded(&workspace_bytes));
  m.def("plan_layout", guarded(&plan_layout));
  m.def("plan_update", guarded(&plan_update));
  m.def("plan_cpu", guarded(&plan_cpu));
  m.def("plan_launch_info", guarded(&plan_launch_info));
  m.def("plan_read_errors", guarded(&plan_read_errors));
  m.def("decode_attention", guarded(&decode_attention), nb::arg("q"), nb::arg("q_dtype"), nb::arg("q_scale").none(),
        nb::arg("k_cache"), nb::arg("v_cache"), nb::arg("kv_dtype"), nb::arg("k_scale").none(),
        nb::arg("v_scale").none(), nb::arg("block_table"), nb::arg("seq_lens"), nb::arg("query_start_loc").none(),
        nb::arg("workspace"), nb::arg("out"), nb::arg("lse").none(), nb::arg("cfg"), nb::arg("max_q_len"),
        nb::arg("softmax_scale"), nb::arg("stream"));
  m.def("attention_prologue", guarded(&attention_prologue));
  m.def("moe_workspace_bytes", guarded(&moe_workspace_bytes));
  m.def("moe_tile_rows", guarded(&moe_tile_rows));
  m.def("fused_moe", guarded(&fused_moe));
  m.def("moe_workspace_layout", guarded(&moe_workspace_layout));
  m.attr("DTYPE_BF16") = static_cast<int>(DType::kBF16);
  m.attr("DTYPE_FP8E4M3") = static_cast<int>(DType::kFP8E4M3);
  m.attr("PLAN_ERROR_SEQ_LEN_CLAMPED") = static_cast<int>(decode::kPlanErrorSeqLenClamped);
  m.attr("PLAN_ERROR_STALE") = static_cast<int>(decode::kPlanErrorStale);
  m.attr("PLAN_ERROR_QUERY_LOC") = static_cast<int>(decode::kPlanErrorQueryLoc);
  m.attr("PLAN_ERROR_BLOCK_ID") = static_cast<int>(decode::kPlanErrorBlockId);
  m.attr("PLAN_HEADER_INTS") = static_cast<int>(decode::kPlanHeaderInts);
  m.attr("PLAN_MAX_SM_SLOTS") = static_cast<int>(decode::kMaxSmSlots);
  m.attr("MOE_INDEX_CHUNKED_MIN_LOCAL_ROWS") = static_cast<int64_t>(moe::kIndexChunkedMinLocalRows);
  m.attr("MOE_WIDE_GATE_UP_MIN_ROWS") = static_cast<int64_t>(moe::kWideGateUpMinRows);
  m.attr("MOE_GEMM_INDEX_MAX_ROWS") = static_cast<int64_t>(moe::kGemmIndexMaxRows);
  m.attr("MOE_GEMM_INDEX_MAX_EXPERTS") = static_cast<int64_t>(moe::kGemmIndexMaxExperts);
  m.attr("MOE_GEMM_INDEX_RULE_ROWS") = static_cast<int64_t>(moe::kGemmIndexRuleRows);
  m.attr("MOE_GEMM_INDEX_RULE_ROWS_NO_MAP") = static_cast<int64_t>(moe::kGemmIndexRuleRowsNoMap);
  m.attr("MOE_GATE_UP_PAIR_MIN_ROWS") = static_cast<int64_t>(moe::kGateUpPairMinRows);
}
