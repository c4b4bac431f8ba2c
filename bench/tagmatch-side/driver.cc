// The side-by-side driver for bench/tagmatch.ts: TagMatch (carzaniga/TagMatch, built from its own
// sources beside this repository by build.sh, never part of it) on the very sets and queries a
// bench/tagmatch.ts run exported with --export-dir: the 192-bit signatures Ambit's GPU index builds
// (6 little-endian u32 words each, which are TagMatch's 3 u64 blocks), a u32 key per set.
//
//   driver DIR [m=MAXPARTITION] [u=PARTITIONER_THREADS] [t=MATCHER_THREADS] [reps=N] [latency=MS]
//
// Loads DIR/sets.sig + DIR/sets.keys, consolidates (TagMatch's balanced partitioning), then
// matches DIR/queries.sig `reps` times with match and with match-unique (after one warm-up pass
// each), and prints JSON lines as it goes: the load first, then one per timed pass (queries per
// second from the first submission to the last answer, keys per query), so a run cut short keeps
// what it measured.
// TagMatch answers from the signatures alone (a Bloom false positive is a key it reports), where
// Ambit's index checks every hit against the tag sets.
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "match_handler.hh"
#include "tagmatch.hh"
#include "tagmatch_query.hh"

using clk = std::chrono::steady_clock;

struct Counter : public match_handler {
  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> keys{0};
  void process_results(query* q) override {
    keys += q->output_keys.size();
    done++;
  }
};

static std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    std::fprintf(stderr, "driver: cannot open %s\n", path.c_str());
    std::exit(2);
  }
  std::streamsize n = in.tellg();
  std::vector<char> buf(static_cast<size_t>(n));
  in.seekg(0);
  in.read(buf.data(), n);
  return buf;
}

static void onCrash(int sig) {
  void* frames[64];
  int n = backtrace(frames, 64);
  std::fprintf(stderr, "driver: signal %d; stack:\n", sig);
  backtrace_symbols_fd(frames, n, 2);
  _exit(128 + sig);
}

static double seconds(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: driver DIR [m=N] [u=N] [t=N] [reps=N] [latency=MS]\n");
    return 2;
  }
  signal(SIGSEGV, onCrash);
  signal(SIGABRT, onCrash);
  std::string dir = argv[1];
  unsigned m = 200000, u = 16, t = 16, reps = 3, latency = 5;
  for (int i = 2; i < argc; i++) {
    if (std::sscanf(argv[i], "m=%u", &m) == 1 || std::sscanf(argv[i], "u=%u", &u) == 1 || std::sscanf(argv[i], "t=%u", &t) == 1 ||
        std::sscanf(argv[i], "reps=%u", &reps) == 1 || std::sscanf(argv[i], "latency=%u", &latency) == 1)
      continue;
    std::fprintf(stderr, "driver: unknown argument %s\n", argv[i]);
    return 2;
  }
  std::vector<char> sig = slurp(dir + "/sets.sig");
  std::vector<char> keys = slurp(dir + "/sets.keys");
  std::vector<char> qsig = slurp(dir + "/queries.sig");
  const size_t n = keys.size() / 4;
  const size_t nq = qsig.size() / 24;
  if (sig.size() != n * 24) {
    std::fprintf(stderr, "driver: %zu signature bytes for %zu keys\n", sig.size(), n);
    return 2;
  }
  auto t0 = clk::now();
  for (size_t i = 0; i < n; i++) {
    block_t b[3];
    std::memcpy(b, sig.data() + 24 * i, 24);
    uint32_t k;
    std::memcpy(&k, keys.data() + 4 * i, 4);
    tagmatch::add(filter_t(b), k);
  }
  auto t1 = clk::now();
  tagmatch::consolidate(m, u);
  auto t2 = clk::now();
  std::fprintf(stderr, "driver: %zu sets added in %.1f s, consolidated in %.1f s\n", n, seconds(t0, t1), seconds(t1, t2));
  std::vector<filter_t> qs(nq);
  for (size_t i = 0; i < nq; i++) {
    block_t b[3];
    std::memcpy(b, qsig.data() + 24 * i, 24);
    qs[i] = filter_t(b);
  }
  tagmatch::set_latency_limit_ms(latency);
  std::fprintf(stderr, "driver: starting %u matcher threads on 1 GPU\n", t);
  tagmatch::start(t, 1);
  std::fprintf(stderr, "driver: started\n");
  std::printf("{\"sets\":%zu,\"queries\":%zu,\"addS\":%.3f,\"consolidateS\":%.3f,\"maxPartition\":%u,\"threads\":%u}\n", n, nq, seconds(t0, t1), seconds(t1, t2), m, t);
  std::fflush(stdout);
  // Queries and handlers live until TagMatch has stopped: it may touch them after the last answer.
  std::vector<tagmatch_query*> all;
  std::vector<Counter*> counters;
  for (int unique = 0; unique < 2; unique++) {
    for (unsigned r = 0; r < reps + 1; r++) {  // the first pass warms up and is not reported
      std::vector<tagmatch_query*> batch(nq);
      for (size_t i = 0; i < nq; i++) all.push_back(batch[i] = new tagmatch_query(qs[i]));
      counters.push_back(new Counter());
      Counter& c = *counters.back();
      auto s = clk::now();
      for (size_t i = 0; i < nq; i++) {
        if (unique) tagmatch::match_unique(batch[i], &c);
        else tagmatch::match(batch[i], &c);
      }
      while (c.done.load() < nq) {
        if (seconds(s, clk::now()) > 120) {
          std::fprintf(stderr, "driver: %llu of %zu queries answered after 120 s\n", (unsigned long long)c.done.load(), nq);
          return 1;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      double sec = seconds(s, clk::now());
      std::fprintf(stderr, "driver: %s pass %u: %.0f q/s, %.2f keys a query\n", unique ? "match-unique" : "match", r, nq / sec, double(c.keys.load()) / nq);
      if (r == 0) continue;
      std::printf("{\"op\":\"%s\",\"pass\":%u,\"qps\":%.1f,\"keysPerQuery\":%.4f}\n", unique ? "match-unique" : "match", r, nq / sec, double(c.keys.load()) / nq);
      std::fflush(stdout);
    }
  }
  tagmatch::stop();
  for (auto* q : all) delete q;
  for (auto* c : counters) delete c;
  return 0;
}
