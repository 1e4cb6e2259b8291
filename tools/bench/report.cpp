#include "report.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <sstream>
#include <stdexcept>

#include "metrics.h"

namespace fabench {

namespace {

const char* baseline_of(flashattn::DeviceType d) {
  return d == flashattn::DeviceType::cuda ? "cuda_naive" : "cpu_reference";
}

const char* device_word(flashattn::DeviceType d) { return d == flashattn::DeviceType::cuda ? "cuda" : "cpu"; }

double tflops(const BenchConfig& c, double ms) { return ms > 0 ? flop_count(c) / (ms * 1e-3) / 1e12 : 0.0; }
double gbps(const BenchConfig& c, double ms) { return ms > 0 ? byte_count(c) / (ms * 1e-3) / 1e9 : 0.0; }

// Four significant digits: readable for 0.0123 ms kernels and 12.3 s reference runs alike.
std::string sig(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, std::fabs(x) >= 1e4 ? "%.0f" : "%.4g", x);
  return buf;
}

// Left-aligned text cell, widened (never cut) when the text is longer.
std::string cell(const std::string& s, size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}
std::string rcell(const std::string& s, size_t width) {
  return s.size() >= width ? " " + s : std::string(width - s.size(), ' ') + s;
}

// Messages of the library can span lines (dispatch lists every backend's reason); a table row must not.
std::string one_line(const std::string& s) {
  std::string out;
  for (char ch : s) out += ch == '\n' ? std::string(" | ") : std::string(1, ch);
  return out;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (ch < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += char(ch);
        }
    }
  }
  return out + "\"";
}

// Numbers with enough digits to plot; null where there is no value (unsupported, error, no baseline).
std::string json_number(double x, bool present = true) {
  if (!present || !std::isfinite(x)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// Counts (FLOPs, bytes) in full: they are integers and plots divide by them.
std::string json_count(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

}  // namespace

void compute_speedups(ConfigResult& result) {
  for (flashattn::DeviceType d : {flashattn::DeviceType::cpu, flashattn::DeviceType::cuda}) {
    const Row* base = nullptr;
    for (const Row& r : result.rows)
      if (r.device == d && r.status == Row::Status::measured && r.impl == baseline_of(d)) base = &r;
    for (const Row& r : result.rows)
      if (!base && r.device == d && r.status == Row::Status::measured) base = &r;
    for (Row& r : result.rows)
      if (base && r.device == d && r.status == Row::Status::measured && r.median_ms > 0)
        r.speedup = base->median_ms / r.median_ms;
  }
}

void print_header(std::ostream& os, const RunInfo& info) {
  os << "flashattn-bench " << info.version << " (commit " << info.commit << "), " << info.date << "\n";
  for (const std::string& d : info.devices) os << "  device: " << d << "\n";
}

void print_table(std::ostream& os, const ConfigResult& result) {
  const BenchConfig& c = result.config;
  os << "\n== " << c.describe() << "  [" << sig(flop_count(c) / 1e9) << " GFLOP, " << sig(byte_count(c) / 1e6)
     << " MB]\n";
  constexpr size_t kImpl = 18, kDevice = 7, kCheck = 36, kNum = 11;
  os << cell("impl", kImpl) << cell("device", kDevice) << cell("check", kCheck) << rcell("median ms", kNum)
     << rcell("speedup", kNum) << rcell("TFLOP/s", kNum) << rcell("GB/s", kNum) << "\n";
  std::vector<std::string> details;
  for (const Row& r : result.rows) {
    os << cell(r.impl, kImpl) << cell(device_word(r.device), kDevice);
    if (r.status == Row::Status::unsupported) {
      os << "unsupported: " << one_line(r.note) << "\n";
      continue;
    }
    if (r.status == Row::Status::error) {
      os << "error: " << one_line(r.note) << "\n";
      continue;
    }
    os << cell(r.check.summary, kCheck) << rcell(sig(r.median_ms), kNum)
       << rcell(r.speedup > 0 ? sig(r.speedup) + "x" : "-", kNum) << rcell(sig(tflops(c, r.median_ms)), kNum)
       << rcell(sig(gbps(c, r.median_ms)), kNum) << "\n";
    if (!r.check.detail.empty()) details.push_back(r.impl + ": " + r.check.detail);
  }
  for (const std::string& d : details) os << "  " << d << "\n";
}

void write_json(const std::string& path, const RunInfo& info, const std::vector<ConfigResult>& results) {
  std::ostringstream js;
  js << "[";
  bool first = true;
  for (const ConfigResult& res : results) {
    const BenchConfig& c = res.config;
    std::ostringstream config;
    config << "{\"batch\": " << c.batch << ", \"seqlen_q\": " << c.seqlen_q << ", \"seqlen_k\": " << c.seqlen_k
           << ", \"heads\": " << c.heads << ", \"heads_k\": " << c.heads_k << ", \"head_dim\": " << c.head_dim
           << ", \"dtype\": " << json_string(flashattn::dtype_name(c.dtype))
           << ", \"causal\": " << (c.causal ? "true" : "false") << ", \"window_left\": " << c.window_left
           << ", \"window_right\": " << c.window_right << ", \"softcap\": " << json_number(c.softcap)
           << ", \"dropout\": " << json_number(c.dropout) << ", \"mode\": " << json_string(mode_name(c.mode))
           << ", \"deterministic\": " << (c.deterministic ? "true" : "false")
           << ", \"flops\": " << json_count(flop_count(c)) << ", \"bytes\": " << json_count(byte_count(c)) << "}";
    for (const Row& r : res.rows) {
      const bool measured = r.status == Row::Status::measured;
      std::string check = r.check.summary;
      if (r.status == Row::Status::unsupported) check = "unsupported: " + r.note;
      if (r.status == Row::Status::error) check = "error: " + r.note;
      js << (first ? "\n  " : ",\n  ") << "{\"device\": " << json_string(r.device_name)
         << ", \"device_type\": " << json_string(device_word(r.device)) << ", \"date\": " << json_string(info.date)
         << ", \"version\": " << json_string(info.version) << ", \"commit\": " << json_string(info.commit)
         << ", \"command\": " << json_string(info.command_line) << ", \"config\": " << config.str()
         << ", \"impl\": " << json_string(r.impl) << ", \"check\": " << json_string(check)
         << ", \"check_detail\": " << json_string(r.check.detail) << ", \"warmup\": " << r.warmup
         << ", \"iters\": " << r.iters << ", \"median_ms\": " << json_number(r.median_ms, measured)
         << ", \"tflops\": " << json_number(tflops(c, r.median_ms), measured)
         << ", \"gbps\": " << json_number(gbps(c, r.median_ms), measured)
         << ", \"speedup\": " << json_number(r.speedup, measured && r.speedup > 0) << "}";
      first = false;
    }
  }
  js << (first ? "]\n" : "\n]\n");
  // Written to a temporary name and renamed, so an interrupted run never leaves a truncated file behind.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << js.str();
    if (!out) throw std::runtime_error("--json: cannot write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("--json: cannot rename '" + tmp + "' to '" + path + "'");
}

}  // namespace fabench
