#pragma once

// ZeroMQ plumbing shared by the workers' client and the servers: multipart receive, socket setup, and the job's
// CURVE keys.
//
// Note [PS authentication]: with auth on (the default), every socket runs ZeroMQ's CURVE handshake with one key
// pair per job. The launcher writes the job's secret (40 Z85 characters) to a file only the user can read and
// names it in STRATA_JOB_SECRET_FILE (or key_file= names one on a shared file system, for multi-node jobs); the
// public key is derived from it. Servers use the pair as their own and also run a ZAP handler that admits only
// clients presenting the same public key: a client without the secret fails the handshake, gets no answer and
// changes nothing, and the server logs the refusal.

#include <string>
#include <vector>

#include <zmq.hpp>

#include "ps_options.h"

namespace strata::ps {

struct CurveKeys {
  std::string publicKey;  // Z85, 40 characters
  std::string secretKey;
};

// The job's keys; throws Error saying where the key was looked for and how to give one.
CurveKeys loadJobKeys(const PsOptions& options);

// Receives every frame of one message (the socket has a message waiting).
std::vector<zmq::message_t> receiveMessage(zmq::socket_t& socket);

// Sends frames as one multipart message.
void sendMessage(zmq::socket_t& socket, std::vector<zmq::message_t>& frames);

// Client side of CURVE on a DEALER before connect().
void makeCurveClient(zmq::socket_t& socket, const CurveKeys& keys);
// Server side of CURVE on a ROUTER before bind().
void makeCurveServer(zmq::socket_t& socket, const CurveKeys& keys);

// zmq's own endpoint ("tcp://0.0.0.0:41234") -> its port.
int endpointPort(const std::string& endpoint);

}  // namespace strata::ps
