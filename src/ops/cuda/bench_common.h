// Helpers shared by the GPU microbenchmarks (src/ops/cuda/*_bench.cu): medians, CUDA-event timing
// and a minimal JSON writer (the benches must run on a bare CUDA image, so no JSON library).
// Not for library code.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"

namespace gyre::cuda::bench {

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median over `reps` of the mean time of `inner` calls fn(i) (i counts calls), in µs per call.
template <typename F>
Result<double> TimeUs(F&& fn, int reps, int inner, cudaStream_t s) {
  GYRE_ASSIGN_OR_RETURN(Event e0, Event::Create());
  GYRE_ASSIGN_OR_RETURN(Event e1, Event::Create());
  std::vector<double> t;
  int call = 0;
  for (int r = 0; r < reps; ++r) {
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0.get(), s));
    for (int i = 0; i < inner; ++i) GYRE_RETURN_IF_ERROR(fn(call++));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e1.get(), s));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e1.get()));
    float ms = 0;
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, e0.get(), e1.get()));
    t.push_back(1000.0 * ms / inner);
  }
  return Median(t);
}

// One JSON object built field by field; non-finite numbers become null.
struct Json {
  std::string s;
  bool first = true;
  void Sep() {
    if (!first) s += ", ";
    first = false;
  }
  Json& Num(const char* k, double v) {
    Sep();
    char buf[64];
    if (std::isfinite(v)) {
      std::snprintf(buf, sizeof buf, "%.6g", v);
    } else {
      std::snprintf(buf, sizeof buf, "null");
    }
    s += std::string("\"") + k + "\": " + buf;
    return *this;
  }
  Json& Str(const char* k, const std::string& v) {
    Sep();
    std::string e;
    for (char c : v) {
      if (c == '"' || c == '\\') e += '\\';
      if (c == '\n') {
        e += "\\n";
        continue;
      }
      e += c;
    }
    s += std::string("\"") + k + "\": \"" + e + "\"";
    return *this;
  }
  Json& Bool(const char* k, bool v) {
    Sep();
    s += std::string("\"") + k + "\": " + (v ? "true" : "false");
    return *this;
  }
  Json& Raw(const char* k, const std::string& v) {
    Sep();
    s += std::string("\"") + k + "\": " + v;
    return *this;
  }
  std::string Obj() const { return "{" + s + "}"; }
};

// A JSON array of already-serialised items, one per line.
inline std::string Array(const std::vector<std::string>& items) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ",\n    " : "\n    ") + items[i];
  return s + (items.empty() ? "]" : "\n  ]");
}

}  // namespace gyre::cuda::bench
