#include "ps_transport.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "strata/error.h"

namespace strata::ps {

CurveKeys loadJobKeys(const PsOptions& options) {
  std::string path = options.keyFile;
  if (path.empty()) {
    const char* env = std::getenv("STRATA_JOB_SECRET_FILE");
    path = env != nullptr ? env : "";
  }
  if (path.empty()) {
    fail(
        "ps: auth is on but no job key was given: `strata train` writes one per job for its local processes "
        "(STRATA_JOB_SECRET_FILE); a multi-node job or processes started by another launcher need "
        "--strategy-opt key_file=PATH (a file with a 40-character Z85 CURVE secret, readable only by you, on a "
        "file system every node sees; make one with `strata ps-keygen PATH`), or auth=off on a trusted network");
  }
  std::ifstream in(path);
  if (!in) {
    fail("ps: cannot read the job key file {} (auth is on)", path);
  }
  std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r' || secret.back() == ' ')) {
    secret.pop_back();
  }
  if (secret.size() != 40) {
    fail("ps: the job key file {} holds {} characters; a CURVE secret is 40 Z85 characters", path, secret.size());
  }
  CurveKeys keys;
  keys.secretKey = secret;
  char publicKey[41] = {};
  if (zmq_curve_public(publicKey, secret.c_str()) != 0) {
    fail("ps: the job key file {} does not hold a Z85 CURVE secret ({})", path, zmq_strerror(zmq_errno()));
  }
  keys.publicKey = publicKey;
  return keys;
}

std::vector<zmq::message_t> receiveMessage(zmq::socket_t& socket) {
  std::vector<zmq::message_t> frames;
  do {
    zmq::message_t frame;
    if (!socket.recv(frame, zmq::recv_flags::none)) {
      fail("ps: receive interrupted");
    }
    frames.push_back(std::move(frame));
  } while (frames.back().more());
  return frames;
}

void sendMessage(zmq::socket_t& socket, std::vector<zmq::message_t>& frames) {
  for (std::size_t i = 0; i < frames.size(); ++i) {
    socket.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

void makeCurveClient(zmq::socket_t& socket, const CurveKeys& keys) {
  socket.set(zmq::sockopt::curve_serverkey, keys.publicKey);
  socket.set(zmq::sockopt::curve_publickey, keys.publicKey);
  socket.set(zmq::sockopt::curve_secretkey, keys.secretKey);
}

void makeCurveServer(zmq::socket_t& socket, const CurveKeys& keys) {
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, keys.secretKey);
  socket.set(zmq::sockopt::zap_domain, "strata-ps");
}

int endpointPort(const std::string& endpoint) {
  const std::size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) {
    fail("ps: endpoint '{}' has no port", endpoint);
  }
  return std::stoi(endpoint.substr(colon + 1));
}

}  // namespace strata::ps
