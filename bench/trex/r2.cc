// r2.cc - benchmark driver that runs the "R2" rule family on T-Rex's CPU
// (CDP / stacks-based) engine and reports the complex events it emits together
// with per-event processing latencies.
//
// The rule installed for --states k (steps numbered from the terminator):
//
//   define CE(att1)
//   from   T0(att=$x)                                   -- step 0, type 0
//          and <sel> T1(att=$x) within W from T0        -- step 1, type 1
//          and <sel> T2(att=$x) within W from T1        -- step 2, type 2
//          ...                                          -- up to step k-1
//          and not N_j(att=$x) between T1 and T0        -- j = 0..n-1, type k+j
//   where  att1 = Sum(T[k-1](att=$x).value within W from T[k-2])
//   consuming T[k-1]                                    -- only with --consume 1
//
// For k = 3 this is the thesis rule R2:
//   C(att=$x) and last B(att=$x) within W from C and last A(att=$x) within W
//   from B, att1 = Sum(A(att=$x).value within W from B).
//
// Input: a text file whose first line is "# ambit-pattern-stream v1", followed
// by one event per line, "type time att value" (integers, time in ms,
// non-decreasing). Blank lines and further '#' lines are ignored.
//
// Output (stdout): one line per complex event, in the order T-Rex hands them to
// its ResultListener:  "ce <terminator index> <att1|-|nan> [<id of step 1>
// ... <id of step k-1>]"  (ids only with --ids), followed by one JSON summary
// line. Diagnostics go to stderr.
//
// Build: bench/trex/build.sh. Only public TRex2-lib APIs are used.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "Common/CompositeEventTemplate.h"
#include "Common/Consts.h"
#include "Common/OpTree.h"
#include "Engine/IndexingTable.h"
#include "Engine/ResultListener.h"
#include "Engine/StacksRule.h"
#include "Engine/TRexEngine.h"
#include "Packets/PubPkt.h"
#include "Packets/RulePkt.h"
#include "Packets/RulePktValueReference.h"

namespace {

// ----------------------------------------------------------------------------
// Command line
// ----------------------------------------------------------------------------

struct Options {
  std::string input;             // event file ("-" = stdin)
  int states = 3;                // k: number of sequence steps (incl. terminator)
  CompKind selection = LAST_WITHIN;
  std::string selectionName = "last";
  uint64_t window = 1000000;     // W in ms, same for every step
  bool aggregate = true;         // Sum(...) into att1
  int negations = 0;             // n
  bool negationParams = true;    // negations constrained by att = $x
  bool stateParams = true;       // att of step i equals att of step i-1
  bool consume = false;          // consuming clause on step k-1
  bool simpleParams = false;     // state parameters as plain (end-checked) ones
  bool direct = false;           // bypass TRexEngine's worker thread
  bool ids = false;              // report the ids of the matched events
  bool quiet = false;            // suppress "ce" lines
  uint64_t timeOffset = 1;       // added to every input timestamp
};

void usage(const char* prog) {
  std::fprintf(stderr,
      "usage: %s [options] EVENTS_FILE\n"
      "  --states k             sequence length incl. terminator (default 3, 1..%d)\n"
      "  --selection S          each|last|first for every non-terminator step (default last)\n"
      "  --window W             window in ms between consecutive steps (default 1000000)\n"
      "  --aggregate A          sum|none (default sum)\n"
      "  --negations n          negated types k..k+n-1 between step 1 and step 0 (default 0)\n"
      "  --negation-params 0|1  negations also require att=$x (default 1)\n"
      "  --state-params 0|1     steps tied by att=$x (default 1; 0: the thesis's basic rules)\n"
      "  --consume 0|1          consuming clause on step k-1 (default 0)\n"
      "  --param-mode M         complex|simple state parameters (default complex)\n"
      "  --engine E             trex (TRexEngine, 1 worker thread) | direct (default trex)\n"
      "  --time-offset ms       added to every timestamp (default 1, see SEMANTICS.md)\n"
      "  --ids                  print the ids (0-based line index) of steps 1..k-1\n"
      "  --quiet                do not print the ce lines\n",
      prog, MAX_RULE_FIELDS);
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "r2: %s\n", msg.c_str());
  std::exit(2);
}

long long parseInt(const std::string& flag, const char* v) {
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0') die("bad integer for " + flag + ": " + v);
  return x;
}

Options parseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) die("missing value for " + a);
      return argv[++i];
    };
    if (a == "--states") o.states = (int)parseInt(a, next());
    else if (a == "--selection") {
      o.selectionName = next();
      if (o.selectionName == "each") o.selection = EACH_WITHIN;
      else if (o.selectionName == "last") o.selection = LAST_WITHIN;
      else if (o.selectionName == "first") o.selection = FIRST_WITHIN;
      else die("--selection must be each|last|first");
    } else if (a == "--window") {
      long long w = parseInt(a, next());
      if (w < 0) die("--window must be >= 0");
      o.window = (uint64_t)w;
    } else if (a == "--aggregate") {
      std::string v = next();
      if (v == "sum") o.aggregate = true;
      else if (v == "none") o.aggregate = false;
      else die("--aggregate must be sum|none");
    } else if (a == "--negations") o.negations = (int)parseInt(a, next());
    else if (a == "--negation-params") o.negationParams = parseInt(a, next()) != 0;
    else if (a == "--state-params") o.stateParams = parseInt(a, next()) != 0;
    else if (a == "--consume") o.consume = parseInt(a, next()) != 0;
    else if (a == "--param-mode") {
      std::string v = next();
      if (v == "complex") o.simpleParams = false;
      else if (v == "simple") o.simpleParams = true;
      else die("--param-mode must be complex|simple");
    } else if (a == "--engine") {
      std::string v = next();
      if (v == "trex") o.direct = false;
      else if (v == "direct") o.direct = true;
      else die("--engine must be trex|direct");
    } else if (a == "--time-offset") {
      long long t = parseInt(a, next());
      if (t < 0) die("--time-offset must be >= 0");
      o.timeOffset = (uint64_t)t;
    } else if (a == "--ids") o.ids = true;
    else if (a == "--quiet") o.quiet = true;
    else if (a == "-h" || a == "--help") { usage(argv[0]); std::exit(0); }
    else if (!a.empty() && a[0] == '-' && a != "-") die("unknown option " + a);
    else if (o.input.empty()) o.input = a;
    else die("more than one input file given");
  }
  if (o.input.empty()) { usage(argv[0]); std::exit(2); }
  // T-Rex sizes its per-rule arrays with MAX_RULE_FIELDS (Common/Consts.h).
  if (o.states < 1 || o.states > MAX_RULE_FIELDS)
    die("--states must be in 1.." + std::to_string(MAX_RULE_FIELDS));
  if (o.negations < 0 || o.negations > MAX_RULE_FIELDS)
    die("--negations must be in 0.." + std::to_string(MAX_RULE_FIELDS));
  if (o.states < 2 && (o.aggregate || o.negations > 0 || o.consume))
    die("--aggregate sum, --negations and --consume need --states >= 2");
  return o;
}

// ----------------------------------------------------------------------------
// Input
// ----------------------------------------------------------------------------

struct InputEvent {
  int type;
  uint64_t time;
  int att;
  int value;
};

std::vector<InputEvent> readEvents(const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path);
    if (!file) die("cannot open " + path);
    in = &file;
  }
  std::vector<InputEvent> events;
  std::string line;
  size_t lineNo = 0;
  uint64_t lastTime = 0;
  while (std::getline(*in, line)) {
    ++lineNo;
    if (lineNo == 1) {
      if (line.rfind("# ambit-pattern-stream v1", 0) != 0)
        die("missing header '# ambit-pattern-stream v1'");
      continue;
    }
    size_t p = line.find_first_not_of(" \t\r");
    if (p == std::string::npos || line[p] == '#') continue;
    long long type, time, att, value;
    if (std::sscanf(line.c_str(), "%lld %lld %lld %lld", &type, &time, &att,
                    &value) != 4 || type < 0 || time < 0)
      die("malformed event at line " + std::to_string(lineNo));
    if (!events.empty() && (uint64_t)time < lastTime)
      die("timestamps decrease at line " + std::to_string(lineNo));
    lastTime = (uint64_t)time;
    events.push_back({(int)type, (uint64_t)time, (int)att, (int)value});
  }
  return events;
}

// ----------------------------------------------------------------------------
// Rule construction (public RulePkt API only)
// ----------------------------------------------------------------------------

// Attribute names used on primitive and composite events.
char kAtt[] = "att";
char kValue[] = "value";
char kId[] = "id";
char kAtt1[] = "att1";

const int kCompositeType = 1000000;  // never used by input events

// Leaf of an expression tree referring to attribute `name` of the event bound
// to state / negation / aggregate `index`.
OpTree* ref(int index, char* name, StateType kind, ValType type = INT) {
  return new OpTree(new RulePktValueReference(index, name, kind), type);
}

std::string stepName(int i) { return "s" + std::to_string(i); }

RulePkt* buildRule(const Options& o) {
  const int k = o.states;
  RulePkt* rule = new RulePkt(true);  // true: rule ids restart from 0
  Constraint none[1];                 // predicates carry no constraints

  // Step 0 (terminator) and steps 1..k-1, each referring to the previous one.
  rule->addRootPredicate(0, none, 0);
  for (int i = 1; i < k; ++i)
    rule->addPredicate(i, none, 0, i - 1, TimeMs(o.window), o.selection);

  // att of step i equals att of step i-1 ($x shared across all steps).
  for (int i = 1; i < k && o.stateParams; ++i) {
    if (o.simpleParams)
      rule->addParameterBetweenStates(i, kAtt, i - 1, kAtt);
    else
      rule->addComplexParameter(EQ, INT, ref(i, kAtt, STATE),
                                ref(i - 1, kAtt, STATE));
  }

  // not N_j(att=$x) between step 1 and step 0.
  for (int j = 0; j < o.negations; ++j) {
    rule->addNegationBetweenStates(k + j, none, 0, 1, 0);
    if (o.negationParams)
      rule->addComplexParameterForNegation(EQ, INT, ref(j, kAtt, NEG),
                                           ref(0, kAtt, STATE));
  }

  CompositeEventTemplate* ce = new CompositeEventTemplate(kCompositeType);
  if (o.aggregate) {
    // Sum(T[k-1](att=$x).value within W from T[k-2]).
    rule->addTimeBasedAggregate(k - 1, none, 0, k - 2, TimeMs(o.window),
                                kValue, SUM);
    rule->addComplexParameterForAggregate(EQ, INT, ref(0, kAtt, AGG),
                                          ref(k - 2, kAtt, STATE));
    // FLOAT: T-Rex computes aggregates as float and returns NaN when the
    // window holds no candidate events; an INT attribute would convert that
    // NaN to int (undefined behaviour).
    ce->addAttribute(kAtt1,
                     new OpTree(new RulePktValueReference(0), FLOAT));
  }
  if (o.ids) {
    for (int i = 1; i < k; ++i) {
      std::string n = stepName(i);
      ce->addAttribute(const_cast<char*>(n.c_str()), ref(i, kId, STATE));
    }
  }
  rule->setCompositeEventTemplate(ce);

  if (o.consume) rule->addConsuming(k - 1);
  return rule;
}

PubPkt* makePacket(const InputEvent& e, size_t index, const Options& o) {
  Attribute attrs[3];
  std::memset(attrs, 0, sizeof(attrs));
  std::strcpy(attrs[0].name, kAtt);
  attrs[0].type = INT;
  attrs[0].intVal = e.att;
  std::strcpy(attrs[1].name, kValue);
  attrs[1].type = INT;
  attrs[1].intVal = e.value;
  std::strcpy(attrs[2].name, kId);
  attrs[2].type = INT;
  attrs[2].intVal = (int)index;
  PubPkt* pkt = new PubPkt(e.type, attrs, o.ids ? 3 : 2);
  pkt->setTime(TimeMs(e.time + o.timeOffset));
  return pkt;
}

// ----------------------------------------------------------------------------
// Result collection
// ----------------------------------------------------------------------------

struct Emitted {
  size_t terminator;         // index of the event whose processing emitted it
  bool hasAtt1;
  float att1;
  std::vector<int> stepIds;  // ids of steps 1..k-1 (only with --ids)
};

// Copies what is needed out of every generated packet; T-Rex frees the packets
// after the listeners return.
class Collector : public ResultListener {
public:
  Collector(const Options& o, std::vector<Emitted>& sink) : opts(o), out(sink) {}

  void setCurrent(size_t index) { current = index; }

  void handleResult(std::set<PubPkt*>& genPkts, double) override {
    for (PubPkt* p : genPkts) {
      Emitted e;
      e.terminator = current;
      e.hasAtt1 = false;
      e.att1 = 0;
      int idx;
      ValType t;
      if (opts.aggregate && p->getAttributeIndexAndType(kAtt1, idx, t)) {
        e.hasAtt1 = true;
        e.att1 = p->getFloatAttributeVal(idx);
      }
      if (opts.ids) {
        for (int i = 1; i < opts.states; ++i) {
          std::string n = stepName(i);
          bool ok = p->getAttributeIndexAndType(const_cast<char*>(n.c_str()),
                                                idx, t);
          e.stepIds.push_back(ok ? p->getIntAttributeVal(idx) : -1);
        }
      }
      out.push_back(std::move(e));
    }
  }

private:
  const Options& opts;
  std::vector<Emitted>& out;
  size_t current = 0;
};

// ----------------------------------------------------------------------------
// Engines
// ----------------------------------------------------------------------------

class Runner {
public:
  virtual ~Runner() {}
  virtual void process(PubPkt* pkt) = 0;
};

// The regular TRexEngine: processPubPkt hands the packet to one worker thread
// and blocks until it has finished, then notifies the listeners.
class TRexRunner : public Runner {
public:
  TRexRunner(RulePkt* rule, ResultListener* listener) : engine(1) {
    engine.processRulePkt(rule);  // takes ownership of the rule
    engine.finalize();
    engine.addResultListener(listener);
    // finalize() only sleeps 1 ms before the first packet may be signalled to
    // the worker; give the worker ample time to reach its wait.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  void process(PubPkt* pkt) override { engine.processPubPkt(pkt); }

private:
  TRexEngine engine;
};

// Same indexing table and StacksRule code, driven from the calling thread
// (StacksRule::processPkt), i.e. without the worker-thread hand-off.
class DirectRunner : public Runner {
public:
  DirectRunner(RulePkt* parRule, ResultListener* parListener)
      : rule(parRule), listener(parListener) {
    stacksRule = new StacksRule(rule);
    table.installRulePkt(rule);
  }
  ~DirectRunner() override {
    delete stacksRule;
    delete rule;
  }
  void process(PubPkt* pkt) override {
    MatchingHandler mh;
    table.processMessage(pkt, mh);
    std::set<PubPkt*> generated;
    stacksRule->processPkt(pkt, &mh, generated, stacksRule->getRuleId());
    if (pkt->decRefCount()) delete pkt;
    listener->handleResult(generated, 0);
    for (PubPkt* g : generated)
      if (g->decRefCount()) delete g;
  }

private:
  RulePkt* rule;
  ResultListener* listener;
  StacksRule* stacksRule;
  IndexingTable table;
};

// ----------------------------------------------------------------------------
// Statistics / output
// ----------------------------------------------------------------------------

std::string statsJson(std::vector<double> us) {
  std::ostringstream s;
  s.precision(6);
  s << std::fixed;
  if (us.empty()) {
    s << "{\"count\":0}";
    return s.str();
  }
  std::sort(us.begin(), us.end());
  auto pct = [&](double q) {
    size_t i = (size_t)std::ceil(q * (double)us.size()) ;
    i = i == 0 ? 0 : i - 1;
    return us[std::min(i, us.size() - 1)];
  };
  double sum = 0;
  for (double v : us) sum += v;
  s << "{\"count\":" << us.size() << ",\"min\":" << us.front()
    << ",\"median\":" << pct(0.5) << ",\"p99\":" << pct(0.99)
    << ",\"max\":" << us.back() << ",\"mean\":" << sum / (double)us.size()
    << "}";
  return s.str();
}

std::string att1Text(const Emitted& e) {
  if (!e.hasAtt1) return "-";
  if (std::isnan(e.att1)) return "nan";
  char buf[64];
  if (e.att1 == std::floor(e.att1) && std::fabs(e.att1) < 1e15)
    std::snprintf(buf, sizeof(buf), "%.0f", (double)e.att1);
  else
    std::snprintf(buf, sizeof(buf), "%g", (double)e.att1);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parseArgs(argc, argv);
  std::vector<InputEvent> events = readEvents(o.input);

  // Packets are built up front so that only engine work is timed. The engine
  // takes ownership of each packet passed to processPubPkt.
  std::vector<PubPkt*> packets;
  packets.reserve(events.size());
  for (size_t i = 0; i < events.size(); ++i)
    packets.push_back(makePacket(events[i], i, o));

  std::vector<Emitted> emitted;
  Collector collector(o, emitted);
  Runner* runner = o.direct
      ? static_cast<Runner*>(new DirectRunner(buildRule(o), &collector))
      : static_cast<Runner*>(new TRexRunner(buildRule(o), &collector));

  using Clock = std::chrono::steady_clock;
  std::vector<double> perEventUs(events.size());
  auto start = Clock::now();
  for (size_t i = 0; i < packets.size(); ++i) {
    collector.setCurrent(i);
    auto t0 = Clock::now();
    runner->process(packets[i]);
    auto t1 = Clock::now();
    perEventUs[i] = std::chrono::duration<double, std::micro>(t1 - t0).count();
  }
  auto end = Clock::now();
  delete runner;

  std::vector<double> perTerminatorUs;
  double engineUs = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    engineUs += perEventUs[i];
    if (events[i].type == 0) perTerminatorUs.push_back(perEventUs[i]);
  }

  if (!o.quiet) {
    std::string line;
    for (const Emitted& e : emitted) {
      line = "ce " + std::to_string(e.terminator) + " " + att1Text(e);
      for (int id : e.stepIds) line += " " + std::to_string(id);
      line += '\n';
      std::fputs(line.c_str(), stdout);
    }
  }

  std::ostringstream js;
  js.precision(3);
  js << std::fixed;
  js << "{\"events\":" << events.size()
     << ",\"complexEvents\":" << emitted.size()
     << ",\"totalMs\":"
     << std::chrono::duration<double, std::milli>(end - start).count()
     << ",\"engineMs\":" << engineUs / 1000.0
     << ",\"perEventUs\":" << statsJson(perEventUs)
     << ",\"perTerminatorUs\":" << statsJson(perTerminatorUs)
     << ",\"config\":{\"states\":" << o.states << ",\"selection\":\""
     << o.selectionName << "\",\"window\":" << o.window
     << ",\"aggregate\":\"" << (o.aggregate ? "sum" : "none")
     << "\",\"negations\":" << o.negations
     << ",\"negationParams\":" << (o.negationParams ? 1 : 0)
     << ",\"stateParams\":" << (o.stateParams ? 1 : 0)
     << ",\"consume\":" << (o.consume ? 1 : 0) << ",\"paramMode\":\""
     << (o.simpleParams ? "simple" : "complex") << "\",\"engine\":\""
     << (o.direct ? "direct" : "trex") << "\",\"timeOffset\":" << o.timeOffset
     << "}}";
  std::printf("%s\n", js.str().c_str());
  return 0;
}
