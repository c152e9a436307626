// Push/pull throughput of one parameter-server worker to one server on loopback (plugins/ps), beside the physical
// limit here (a plain copy of the same bytes) and the DDP all-reduce of the same buffer (Gloo, 2 ranks, loopback).
// One round = a push of N bytes of gradients and the answer with N bytes of new parameters (sync mode, plain SGD
// on the server). Prints medians over --rounds rounds, with and without CURVE encryption (auth on is the default).
//   build/bench/strata_bench_ps_pushpull [--rounds 15] [--sizes-mb 1,25,100]
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <zmq.hpp>

#include "ps_test_support.h"
#include "strata/comm/gloo_process_group.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace strata;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double copySeconds(std::size_t bytes, int rounds) {
  std::vector<char> a(bytes, 1);
  std::vector<char> b(bytes, 2);
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);  // the push's bytes
    std::memcpy(a.data(), b.data(), bytes);  // the answer's
    times.push_back(secondsSince(start));
  }
  return median(times);
}

double pushPullSeconds(std::size_t bytes, int rounds, bool auth, const std::string& keyFile) {
  std::map<std::string, std::string> options{{"auth", auth ? "on" : "off"}};
  if (auth) {
    options["key_file"] = keyFile;
  }
  ps::testing::ServerThread server(1, options);
  const auto n = static_cast<std::int64_t>(bytes / sizeof(float));
  ps::FlatLayout layout;
  layout.groups = {{DType::Float32, n}};
  std::vector<float> values(static_cast<std::size_t>(n), 1.0F);
  std::vector<float> gradients(static_cast<std::size_t>(n), 1e-6F);
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  if (auth) {
    ps::makeCurveClient(socket, ps::loadJobKeys(ps::parsePsOptions(options)));
  }
  socket.connect("tcp://" + server.endpoint());
  const auto request = [&](ps::Kind kind, std::uint64_t sequence, std::vector<zmq::message_t> data) {
    ps::Header h;
    h.kind = static_cast<std::uint16_t>(kind);
    h.worker = 0;
    h.frames = static_cast<std::uint32_t>(data.size());
    h.sequence = sequence;
    h.lr = 0.01;
    const auto header = ps::encodeHeader(h);
    socket.send(zmq::message_t(header.data(), header.size()),
                data.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
    for (std::size_t i = 0; i < data.size(); ++i) {
      socket.send(data[i], i + 1 < data.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
    std::vector<zmq::message_t> reply = ps::receiveMessage(socket);
    std::string why;
    const auto answer =
        ps::decodeHeader(ps::Frame(static_cast<const std::byte*>(reply.at(0).data()), reply[0].size()), why);
    if (!answer || (answer->kind != static_cast<std::uint16_t>(ps::Kind::Params) && kind != ps::Kind::Init)) {
      throw std::runtime_error("unexpected answer: " + (reply.size() > 1 ? reply[1].to_string() : why));
    }
    std::size_t at = 0;  // the worker takes the new values, segment by segment
    for (std::size_t i = 1; i < reply.size(); ++i) {
      std::memcpy(reinterpret_cast<char*>(values.data()) + at, reply[i].data(), reply[i].size());
      at += reply[i].size();
    }
  };
  // The frames of a push: zero-copy slices of the gradients, one per segment (Note [PS keys]), as the plugin sends.
  const std::vector<ps::Segment> segments = ps::partitionKeys(layout, 1).at(0);
  const auto layoutBytes = ps::encodeLayout(layout);
  std::vector<zmq::message_t> init;
  init.emplace_back(layoutBytes.data(), layoutBytes.size());
  for (const ps::Segment& segment : segments) {
    init.emplace_back(values.data() + segment.offset, static_cast<std::size_t>(segment.count) * sizeof(float));
  }
  request(ps::Kind::Init, 1, std::move(init));
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    std::vector<zmq::message_t> push;
    for (const ps::Segment& segment : segments) {
      push.emplace_back(gradients.data() + segment.offset, static_cast<std::size_t>(segment.count) * sizeof(float),
                        nullptr);
    }
    request(ps::Kind::Push, static_cast<std::uint64_t>(r + 2), std::move(push));
    times.push_back(secondsSince(start));
  }
  return median(times);
}

double allReduceSeconds(std::size_t bytes, int rounds) {
  auto store = std::make_shared<InMemoryStore>();
  std::vector<double> times;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      GlooProcessGroup group(store, rank, 2);
      Tensor t = Tensor::zeros(DType::Float32, {static_cast<std::int64_t>(bytes / sizeof(float))});
      for (int r = 0; r < rounds; ++r) {
        const auto start = Clock::now();
        group.allReduce(t, ReduceOp::Average)->wait(std::chrono::minutes(5));
        if (rank == 0) {
          times.push_back(secondsSince(start));
        }
      }
    });
  }
  for (std::thread& t : ranks) {
    t.join();
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15;
  std::vector<double> sizesMb{1, 25, 100};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--rounds") {
      rounds = std::stoi(argv[i + 1]);
    } else if (flag == "--sizes-mb") {
      sizesMb.clear();
      std::stringstream list(argv[i + 1]);
      for (std::string item; std::getline(list, item, ',');) {
        sizesMb.push_back(std::stod(item));
      }
    } else {
      std::cerr << "usage: " << argv[0] << " [--rounds N] [--sizes-mb 1,25,100]\n";
      return 2;
    }
  }
  const std::filesystem::path keyFile = std::filesystem::temp_directory_path() / "strata_bench_ps.key";
  {
    char publicKey[41];
    char secretKey[41];
    zmq_curve_keypair(publicKey, secretKey);
    std::ofstream(keyFile) << secretKey << "\n";
  }
  fmt::print(
      "| size | copy (2 x N) | push+pull, auth off | push+pull, CURVE | all-reduce (Gloo, 2 ranks) | "
      "off / copy | off / all-reduce |\n| --- | --- | --- | --- | --- | --- | --- |\n");
  for (double mb : sizesMb) {
    const auto bytes = static_cast<std::size_t>(mb * 1024 * 1024);
    const double copy = copySeconds(bytes, rounds);
    const double plain = pushPullSeconds(bytes, rounds, false, "");
    const double curve = pushPullSeconds(bytes, rounds, true, keyFile.string());
    const double reduce = allReduceSeconds(bytes, rounds);
    const auto rate = [&](double s) { return fmt::format("{:.2f} ms ({:.2f} GB/s)", s * 1e3, 2 * bytes / s / 1e9); };
    fmt::print("| {} MB | {} | {} | {} | {:.2f} ms | {:.1f}x | {:.2f}x |\n", mb, rate(copy), rate(plain), rate(curve),
               reduce * 1e3, plain / copy, plain / reduce);
  }
  std::filesystem::remove(keyFile);
  return 0;
}
