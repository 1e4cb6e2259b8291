#include "args.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>

namespace fabench {

namespace {

int64_t parse_int(const std::string& flag, const std::string& text, int64_t min_value) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end) throw UsageError(flag + ": expected an integer, got '" + text + "'");
  if (v < min_value) throw UsageError(flag + ": expected an integer >= " + std::to_string(min_value) + ", got " + text);
  return v;
}

float parse_float(const std::string& flag, const std::string& text, float lo, float hi_exclusive) {
  size_t used = 0;
  float v = 0;
  try {
    v = std::stof(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(v))
    throw UsageError(flag + ": expected a number, got '" + text + "'");
  if (v < lo || v >= hi_exclusive) {
    std::ostringstream s;
    s << flag << ": expected a value in [" << lo << ", " << hi_exclusive << "), got " << text;
    throw UsageError(s.str());
  }
  return v;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream s(text);
  while (std::getline(s, item, ',')) out.push_back(item);
  if (!text.empty() && text.back() == ',') out.push_back("");
  return out;
}

std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& item : split_commas(text)) out.push_back(parse_int(flag, item, 1));
  if (out.empty()) throw UsageError(flag + ": expected a comma-separated list of positive integers, got ''");
  return out;
}

DType parse_dtype(const std::string& text) {
  if (text == "f32") return DType::f32;
  if (text == "f16") return DType::f16;
  if (text == "bf16") return DType::bf16;
  if (text == "e4m3") return DType::fp8_e4m3;
  throw UsageError("--dtype: expected f32, f16, bf16 or e4m3, got '" + text + "'");
}

Mode parse_mode(const std::string& text) {
  if (text == "fwd") return Mode::fwd;
  if (text == "bwd") return Mode::bwd;
  if (text == "fwdbwd") return Mode::fwdbwd;
  throw UsageError("--mode: expected fwd, bwd or fwdbwd, got '" + text + "'");
}

DeviceChoice parse_device(const std::string& text) {
  if (text == "cpu") return DeviceChoice::cpu;
  if (text == "cuda") return DeviceChoice::cuda;
  if (text == "all") return DeviceChoice::all;
  throw UsageError("--device: expected cpu, cuda or all, got '" + text + "'");
}

std::string quote_if_needed(const std::string& arg) {
  if (!arg.empty() && arg.find_first_of(" \t\"'") == std::string::npos) return arg;
  std::string q = "'";
  for (char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) o.command_line += ' ';
    o.command_line += quote_if_needed(argv[i]);
  }

  // --seqlen sets both lengths unless --seqlen-q/--seqlen-k say otherwise, in any order; --heads-k
  // follows --heads unless given.
  std::optional<int64_t> seqlen, seqlen_q, seqlen_k, heads_k;
  BenchConfig& c = o.config;

  using Handler = std::function<void(const std::string& flag, const std::string& value)>;
  const std::map<std::string, Handler> with_value = {
      {"--batch", [&](auto& f, auto& v) { c.batch = parse_int(f, v, 1); }},
      {"--seqlen", [&](auto& f, auto& v) { seqlen = parse_int(f, v, 1); }},
      {"--seqlen-q", [&](auto& f, auto& v) { seqlen_q = parse_int(f, v, 1); }},
      {"--seqlen-k", [&](auto& f, auto& v) { seqlen_k = parse_int(f, v, 1); }},
      {"--heads", [&](auto& f, auto& v) { c.heads = parse_int(f, v, 1); }},
      {"--heads-k", [&](auto& f, auto& v) { heads_k = parse_int(f, v, 1); }},
      {"--dim", [&](auto& f, auto& v) { c.head_dim = parse_int(f, v, 1); }},
      {"--dtype", [&](auto&, auto& v) { c.dtype = parse_dtype(v); }},
      {"--window",
       [&](auto& f, auto& v) {
         const std::vector<std::string> lr = split_commas(v);
         if (lr.size() != 2) throw UsageError(f + ": expected L,R (each -1 for unbounded or >= 0), got '" + v + "'");
         c.window_left = int(parse_int(f + " (left)", lr[0], -1));
         c.window_right = int(parse_int(f + " (right)", lr[1], -1));
       }},
      {"--softcap", [&](auto& f, auto& v) { c.softcap = parse_float(f, v, 0.0f, INFINITY); }},
      {"--dropout", [&](auto& f, auto& v) { c.dropout = parse_float(f, v, 0.0f, 1.0f); }},
      {"--mode", [&](auto&, auto& v) { c.mode = parse_mode(v); }},
      {"--impl",
       [&](auto& f, auto& v) {
         o.impls.clear();
         if (v == "all") return;
         for (const std::string& name : split_commas(v)) {
           if (name.empty())
             throw UsageError(f + ": expected 'all' or backend names separated by commas, got '" + v + "'");
           o.impls.push_back(name);
         }
       }},
      {"--warmup", [&](auto& f, auto& v) { o.warmup = int(parse_int(f, v, 0)); }},
      {"--iters", [&](auto& f, auto& v) { o.iters = int(parse_int(f, v, 1)); }},
      {"--json", [&](auto&, auto& v) { o.json_path = v; }},
      {"--device", [&](auto&, auto& v) { o.device = parse_device(v); }},
      {"--threads", [&](auto& f, auto& v) { o.threads = int(parse_int(f, v, 1)); }},
      {"--cpu-isa", [&](auto&, auto& v) { o.cpu_isa = v; }},
      {"--dims", [&](auto& f, auto& v) { o.sweep_dims = parse_int_list(f, v); }},
      {"--seqlens", [&](auto& f, auto& v) { o.sweep_seqlens = parse_int_list(f, v); }},
  };
  const std::map<std::string, std::function<void()>> switches = {
      {"--causal", [&] { c.causal = true; }},
      {"--no-check", [&] { o.check = false; }},
      {"--deterministic", [&] { c.deterministic = true; }},
      {"--sweep", [&] { o.sweep = true; }},
      {"--cpu-time", [&] { o.cpu_time = true; }},
      {"--list", [&] { o.list = true; }},
      {"--version", [&] { o.version = true; }},
      {"--help", [&] { o.help = true; }},
      {"-h", [&] { o.help = true; }},
  };

  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    bool has_inline_value = false;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_inline_value = true;
    }
    if (auto s = switches.find(arg); s != switches.end()) {
      if (has_inline_value) throw UsageError(arg + ": takes no value, got '" + value + "'");
      s->second();
      continue;
    }
    auto h = with_value.find(arg);
    if (h == with_value.end()) throw UsageError("unknown argument '" + arg + "' (see --help)");
    if (!has_inline_value) {
      if (i + 1 >= argc) throw UsageError(arg + ": expected a value, got the end of the command line");
      value = argv[++i];
    }
    h->second(arg, value);
  }

  c.seqlen_q = seqlen_q.value_or(seqlen.value_or(c.seqlen_q));
  c.seqlen_k = seqlen_k.value_or(seqlen.value_or(c.seqlen_k));
  c.heads_k = heads_k.value_or(c.heads);
  if (c.dtype == DType::fp8_e4m3 && c.mode != Mode::fwd)
    throw UsageError("--dtype e4m3: the FP8 call is a forward; expected --mode fwd, got --mode " +
                     std::string(c.mode == Mode::bwd ? "bwd" : "fwdbwd"));
  if (c.dtype == DType::fp8_e4m3 && c.dropout > 0.0f)
    throw UsageError("--dtype e4m3: the FP8 forward has no dropout; expected --dropout 0, got " +
                     std::to_string(c.dropout));
  if (c.heads % c.heads_k != 0)
    throw UsageError("--heads-k: expected a divisor of --heads (" + std::to_string(c.heads) + "), got " +
                     std::to_string(c.heads_k));
  if (o.sweep) {
    for (int64_t d : o.sweep_dims)
      if (2048 % d != 0)
        throw UsageError("--dims: expected divisors of the hidden size 2048, got " + std::to_string(d));
  }
  return o;
}

std::string usage() {
  return R"(flashattn-bench: time every flashattn backend on an attention call, checked against the fp64 reference.

Usage: flashattn-bench [flags]          (no flags: B=8 S=256 H=16 D=64 f16 fwd, every backend available)

Problem
  --batch N              batch size (default 8)
  --seqlen N             query and key length (default 256)
  --seqlen-q N           query length (overrides --seqlen)
  --seqlen-k N           key length (overrides --seqlen)
  --heads N              query heads (default 16)
  --heads-k N            key/value heads, dividing --heads (GQA/MQA; default: --heads)
  --dim N                head dim (default 64)
  --dtype f32|f16|bf16|e4m3  storage dtype (default f16); e4m3: q, k, v in FP8, out in bf16, forward only
  --causal               causal mask, aligned bottom-right
  --deterministic        the backward's bitwise-repeatable mode
  --window L,R           sliding window (-1: unbounded side)
  --softcap X            logit soft-capping (0: off)
  --dropout P            dropout probability in [0, 1)
  --mode fwd|bwd|fwdbwd  what is timed (default fwd)

Sweep (FlashAttention convention: H = 2048/D, B = 16384/S, causal and not)
  --sweep                run the sweep instead of the single config
  --dims LIST            head dims (default 64,128)
  --seqlens LIST         sequence lengths (default 512,1024,2048,4096,8192,16384)

Backends and timing
  --impl all|NAME[,NAME] backends to run (default all)
  --device cpu|cuda|all  devices to run on (default all; --sweep with --impl all: cuda when a GPU is visible)
  --warmup N             untimed runs first (default 1 on CPU, 5 on CUDA)
  --iters N              timed runs; the median is reported (default 5 on CPU, 50 on CUDA)
  --threads N            OpenMP threads of the CPU backends
  --cpu-time             time CPU backends in process CPU time / threads (busy time per core; robust on a
                         shared machine) instead of wall clock
  --cpu-isa NAME         cpu_flash's instruction-set build: one of flashattn::cpu_isas() (default: the best)
  --no-check             skip the all-close check against cpu_reference

Output
  --json FILE            also write one JSON record per row (rewritten after each config)
  --list                 print the backends and whether each supports the configured call, then exit
  --version              print versions and the commit, then exit
  --help                 this text
)";
}

}  // namespace fabench
