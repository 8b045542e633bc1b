// Test helper (header-only, tests only): both ends of a fresh TCP loopback connection.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <utility>

#include "transfer/faulty_connection.h"
#include "transfer/tcp_connection.h"

namespace gyre::transfer {

// (client, server); both null (and a test failure) when the connection cannot be made.
inline std::pair<std::unique_ptr<Connection>, std::unique_ptr<Connection>> TcpPair() {
  using std::chrono::milliseconds;
  auto listener = TcpListener::Listen("127.0.0.1", 0);
  EXPECT_TRUE(listener.ok()) << listener.status().ToString();
  if (!listener.ok()) return {};
  Result<std::unique_ptr<Connection>> server = Status::Internal("not accepted");
  std::thread acc([&] { server = (*listener)->Accept(milliseconds(5000)); });
  auto client = TcpConnect("127.0.0.1", (*listener)->port(), milliseconds(5000));
  acc.join();
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  if (!client.ok() || !server.ok()) return {};
  return {std::move(*client), std::move(*server)};
}

// `conn` as it is for seed 0, else behind a FaultyConnection that drops, corrupts, truncates,
// duplicates and reorders 10 % of the frames each (seeded).
inline std::unique_ptr<Connection> WithMixedFaults(std::unique_ptr<Connection> conn, uint64_t seed) {
  if (seed == 0) return conn;
  FaultPolicy p;
  p.seed = seed;
  p.drop = p.corrupt = p.truncate = 0.1, p.duplicate = p.reorder = 0.1;
  return std::make_unique<FaultyConnection>(std::move(conn), p);
}

}  // namespace gyre::transfer
