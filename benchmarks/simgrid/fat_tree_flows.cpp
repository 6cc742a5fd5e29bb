/* Runs a set of flows through SimGrid's flow-level network model (CM02, max-min sharing) and
 * records when each one finishes, so that fabricsim's engine can be checked and timed against
 * SimGrid on the very same flows and routes. compare.py writes the input and reads the output;
 * see README.md next to this file.
 *
 * Routing. SimGrid routes per pair of hosts, but fabricsim's benchmark draws a spine per flow,
 * so two flows between the same hosts may take different paths. Every flow's route is given as
 * two halves: an "up" half that starts at its source host (host uplink, leaf uplink) and a
 * "down" half that ends at its destination (spine downlink, host downlink). Each distinct up
 * half is one SimGrid source host and each distinct down half one SimGrid destination host, all
 * in one star zone, where the route from A to B is A's up links then B's down links. On the
 * fat-tree that is one source host per (real host, spine) and one destination host per
 * (real host, spine), plus one of each per real host for flows that stay under their leaf: the
 * star zone stores O(hosts) link lists and builds each route in O(route length), where a full
 * routing table would hold (hosts x spines)^2 entries. The links are shared objects, so all the
 * copies of a host load the same uplink and downlink. The links themselves are exactly the
 * input's: one SimGrid link per directed link, SHARED, with its capacity and latency.
 *
 * Latency. CM02 makes a flow wait its route's latency and then transfer at its max-min share,
 * as fabricsim does, but it weights the sharing by 1/latency: a flow's "sharing penalty" is its
 * route latency, so on a common link a 2-link flow gets twice the rate of a 4-link flow.
 * --latency=start removes that weighting: SimGrid's links get latency 0 (every penalty is then
 * 1, plain max-min) and each flow is started at start_s plus its route's latency instead.
 * --latency=links keeps the latency on the links, CM02's own semantics.
 *
 * Input (text, whitespace separated; every number as written by Python's repr):
 *   fabricsim-simgrid-flows 1
 *   links N_LINKS            then per link: capacity_Bps latency_s      (link id = line order)
 *   sources N_SOURCES        then per source: n_links link_id...        (its up links)
 *   destinations N_DESTS     then per destination: n_links link_id...   (its down links)
 *   flows N_FLOWS            then per flow: source destination bytes start_s
 * Output: one line per flow, in input order, with its finish time in seconds ("nan" if it did
 * not finish). Wall times go to stdout as "key value" lines.
 *
 * Usage: fat_tree_flows FLOWS_IN FINISH_OUT [--latency=start|links] [--routes-out=FILE]
 *                       [--wall-limit-s=SECONDS] [--cfg=name:value ...]
 * --routes-out writes, per flow, the link ids of the route SimGrid computes for it (to check
 * that it is the intended one) and the latency SimGrid adds up along it.
 * --wall-limit-s stops the simulation after that much wall-clock time, writes what finished
 * and reports how far it got. Other --cfg and --log options are SimGrid's own.
 */

#include <simgrid/s4u.hpp>
#include <xbt/config.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace sg4 = simgrid::s4u;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0)
{
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Flows {
  std::vector<double> capacity_Bps;
  std::vector<double> latency_s;
  std::vector<std::vector<int>> up;   // per source host: link ids
  std::vector<std::vector<int>> down; // per destination host: link ids
  std::vector<int> src;
  std::vector<int> dst;
  std::vector<double> bytes;
  std::vector<double> start_s;
};

void expect_word(std::istream& in, const std::string& word)
{
  std::string got;
  if (not(in >> got) || got != word)
    throw std::runtime_error("flow file: expected '" + word + "', got '" + got + "'");
}

size_t read_count(std::istream& in, const std::string& section)
{
  expect_word(in, section);
  size_t n = 0;
  if (not(in >> n))
    throw std::runtime_error("flow file: no count after '" + section + "'");
  return n;
}

std::vector<std::vector<int>> read_link_lists(std::istream& in, const std::string& section, size_t n_links)
{
  std::vector<std::vector<int>> lists(read_count(in, section));
  for (auto& list : lists) {
    size_t k = 0;
    in >> k;
    list.resize(k);
    for (auto& id : list) {
      in >> id;
      if (id < 0 || static_cast<size_t>(id) >= n_links)
        throw std::runtime_error("flow file: unknown link id in " + section);
    }
  }
  return lists;
}

Flows read_flows(const std::string& path)
{
  std::ifstream in(path);
  if (not in)
    throw std::runtime_error("cannot open " + path);
  expect_word(in, "fabricsim-simgrid-flows");
  expect_word(in, "1");
  Flows f;
  size_t n_links = read_count(in, "links");
  f.capacity_Bps.resize(n_links);
  f.latency_s.resize(n_links);
  for (size_t i = 0; i < n_links; i++)
    in >> f.capacity_Bps[i] >> f.latency_s[i];
  f.up   = read_link_lists(in, "sources", n_links);
  f.down = read_link_lists(in, "destinations", n_links);
  size_t n_flows = read_count(in, "flows");
  f.src.resize(n_flows);
  f.dst.resize(n_flows);
  f.bytes.resize(n_flows);
  f.start_s.resize(n_flows);
  for (size_t i = 0; i < n_flows; i++) {
    in >> f.src[i] >> f.dst[i] >> f.bytes[i] >> f.start_s[i];
    if (f.src[i] < 0 || static_cast<size_t>(f.src[i]) >= f.up.size() || f.dst[i] < 0 ||
        static_cast<size_t>(f.dst[i]) >= f.down.size())
      throw std::runtime_error("flow file: flow " + std::to_string(i) +
                               " names an unknown source or destination");
  }
  if (not in)
    throw std::runtime_error("flow file: truncated");
  return f;
}

struct Platform {
  std::vector<sg4::Host*> sources;
  std::vector<sg4::Host*> destinations;
};

/* One star zone holding every source and destination host; see the header comment. The hosts'
 * CPUs are never used (speed 1 flop/s is a placeholder). */
Platform build_platform(const sg4::Engine& engine, const Flows& f, bool latency_on_links)
{
  auto* zone = engine.get_netzone_root()->add_netzone_star("fat_tree");
  std::vector<const sg4::Link*> links(f.capacity_Bps.size());
  for (size_t i = 0; i < links.size(); i++)
    links[i] = zone->add_link("l" + std::to_string(i), f.capacity_Bps[i])
                   ->set_latency(latency_on_links ? f.latency_s[i] : 0.0)
                   ->seal();
  auto in_route = [&links](const std::vector<int>& ids) {
    std::vector<sg4::LinkInRoute> route;
    for (int id : ids)
      route.emplace_back(links[id]);
    return route;
  };
  Platform p;
  for (size_t s = 0; s < f.up.size(); s++) {
    auto* host = zone->add_host("src" + std::to_string(s), 1.0)->seal();
    zone->add_route(host, nullptr, in_route(f.up[s]), false);
    p.sources.push_back(host);
  }
  for (size_t d = 0; d < f.down.size(); d++) {
    auto* host = zone->add_host("dst" + std::to_string(d), 1.0)->seal();
    zone->add_route(nullptr, host, in_route(f.down[d]), false);
    p.destinations.push_back(host);
  }
  zone->seal();
  return p;
}

double route_latency_s(const Flows& f, size_t i)
{
  double total = 0.0;
  for (int id : f.up[f.src[i]])
    total += f.latency_s[id];
  for (int id : f.down[f.dst[i]])
    total += f.latency_s[id];
  return total;
}

void write_routes(const std::string& path, const Flows& f, const Platform& p)
{
  std::FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr)
    throw std::runtime_error("cannot write " + path);
  for (size_t i = 0; i < f.src.size(); i++) {
    auto [route, latency] = p.sources[f.src[i]]->route_to(p.destinations[f.dst[i]]);
    std::fprintf(out, "%.17g", latency);
    for (const auto* link : route)
      std::fprintf(out, " %s", link->get_cname() + 1); // names are "l<id>"
    std::fprintf(out, "\n");
  }
  std::fclose(out);
}

struct Options {
  std::string flows_in;
  std::string finish_out;
  std::string routes_out;
  bool latency_on_links = false;
  double wall_limit_s   = std::numeric_limits<double>::infinity();
};

Options parse_options(int argc, char** argv)
{
  Options o;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; i++) {
    std::string arg = argv[i];
    if (arg == "--latency=links")
      o.latency_on_links = true;
    else if (arg == "--latency=start")
      o.latency_on_links = false;
    else if (arg.rfind("--routes-out=", 0) == 0)
      o.routes_out = arg.substr(13);
    else if (arg.rfind("--wall-limit-s=", 0) == 0)
      o.wall_limit_s = std::stod(arg.substr(15));
    else if (arg.rfind("--", 0) == 0)
      throw std::runtime_error("unknown option " + arg);
    else
      positional.push_back(arg);
  }
  if (positional.size() != 2)
    throw std::runtime_error("usage: fat_tree_flows FLOWS_IN FINISH_OUT [--latency=start|links] "
                             "[--routes-out=FILE] [--wall-limit-s=SECONDS] [--cfg=name:value ...]");
  o.flows_in   = positional[0];
  o.finish_out = positional[1];
  return o;
}

void write_finish(const std::string& path, const std::vector<double>& finish_s)
{
  std::FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr)
    throw std::runtime_error("cannot write " + path);
  for (double t : finish_s)
    std::fprintf(out, "%.17g\n", t);
  std::fclose(out);
}

} // namespace

int main(int argc, char** argv)
{
  sg4::Engine engine(&argc, argv); // takes SimGrid's own --cfg and --log options out of argv
  Options opt;
  Flows flows;
  try {
    opt   = parse_options(argc, argv);
    flows = read_flows(opt.flows_in);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }

  /* Pure max-min: CM02 without its correction factors (latency and bandwidth factors 1, no
   * weight-S term), no reverse-path cross-traffic (on by default), no TCP window bound
   * (TCP-gamma 0 disables the rate bound gamma / (2 * latency)). Only what --cfg left at its
   * default is set here, so the command line wins. */
  for (auto [name, value] : {std::pair{"network/model", "CM02"}, {"network/crosstraffic", "0"},
                             {"network/TCP-gamma", "0"}, {"network/latency-factor", "1"},
                             {"network/bandwidth-factor", "1"}, {"network/weight-S", "0"}})
    if (simgrid::config::is_default(name))
      sg4::Engine::set_config(std::string(name) + ":" + value);

  auto t_build    = Clock::now();
  Platform p      = build_platform(engine, flows, opt.latency_on_links);
  double build_s  = seconds_since(t_build);
  size_t n_flows  = flows.src.size();
  if (not opt.routes_out.empty())
    write_routes(opt.routes_out, flows, p);

  /* Launch order and times: by start time (plus route latency when SimGrid's links have none). */
  std::vector<double> launch_s(n_flows);
  for (size_t i = 0; i < n_flows; i++)
    launch_s[i] = opt.latency_on_links ? flows.start_s[i] : flows.start_s[i] + route_latency_s(flows, i);
  std::vector<size_t> order(n_flows);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&launch_s](size_t a, size_t b) { return launch_s[a] < launch_s[b]; });

  std::vector<double> finish_s(n_flows, std::nan(""));
  size_t n_done = 0;
  /* One actor starts every flow at its time, as a host-to-host communication (no mailbox, no
   * receiving actor); a completion callback records its finish time. SimGrid fires completion
   * callbacks only on communications that are not detached, and cancels an actor's pending
   * communications when it ends, so the launcher then waits for all of them. */
  std::vector<sg4::CommPtr> comms;
  comms.reserve(n_flows);
  p.sources.at(0)->add_actor("launcher", [&]() {
    for (size_t i : order) {
      if (launch_s[i] > sg4::Engine::get_clock())
        sg4::this_actor::sleep_until(launch_s[i]);
      auto comm = sg4::Comm::sendto_init(p.sources[flows.src[i]], p.destinations[flows.dst[i]]);
      comm->set_payload_size(static_cast<uint64_t>(flows.bytes[i]));
      comm->on_this_completion_cb([&finish_s, &n_done, i](sg4::Comm const&) {
        finish_s[i] = sg4::Engine::get_clock();
        n_done++;
      });
      comm->start();
      comms.push_back(std::move(comm));
    }
    for (auto const& comm : comms)
      comm->wait();
  });

  auto t_run = Clock::now();
  /* Writes the finish times and the wall times; out_of_time: the wall limit cut the run short. */
  auto report = [&](bool out_of_time) {
    write_finish(opt.finish_out, finish_s);
    std::printf("platform_build_wall_s %.6f\n", build_s);
    std::printf("engine_run_wall_s %.6f\n", seconds_since(t_run));
    std::printf("n_flows %zu\n", n_flows);
    std::printf("n_finished %zu\n", n_done);
    std::printf("simulated_s %.17g\n", sg4::Engine::get_clock());
    std::printf("stopped_by_wall_limit %d\n", out_of_time ? 1 : 0);
    std::fflush(stdout);
  };
  if (std::isfinite(opt.wall_limit_s))
    /* Checked at every step of simulated time; past the limit, report and leave at once (the
     * flows still running are abandoned, there is nothing to clean up for). */
    sg4::Engine::on_time_advance_cb([&](double) {
      if (seconds_since(t_run) > opt.wall_limit_s) {
        report(true);
        std::_Exit(3);
      }
    });
  engine.run();
  report(false);
  return 0;
}
