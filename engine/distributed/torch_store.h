#pragma once
// A client of PyTorch's TCPStore, the key-value store torchrun's agent serves
// on MASTER_PORT under its default (static) rendezvous: enough to set a key and
// to wait for and read one, so fanout's ranks can meet through it. Speaks torch
// 1.x's protocol and torch >= 2.0's (a VALIDATE message first, every query type
// shifted by one), found by probing (Note [TCPStore protocol versions]). Every
// call is bounded by the timeout; a reply is bounded in size.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace fanout::distributed {

class TorchStore {
 public:
  // Connects to addr:port, retrying until `timeout`, and detects the protocol.
  // Throws fanout::Error naming addr:port when nothing answers as a TCPStore.
  TorchStore(const std::string& addr, int port, std::chrono::milliseconds timeout);
  ~TorchStore();
  TorchStore(const TorchStore&) = delete;
  TorchStore& operator=(const TorchStore&) = delete;

  void set(const std::string& key, const std::string& value);
  // Blocks until every key exists (fanout::Error after the timeout).
  void wait(const std::vector<std::string>& keys);
  // wait({key}), then its value (at most 1 MiB).
  std::string get(const std::string& key);
  // The number of keys the store holds.
  int64_t num_keys();
  // 1: torch 1.x's protocol; 2: torch >= 2.0's.
  int protocol() const { return protocol_; }

 private:
  void send_bytes(const std::string& bytes);
  void recv_bytes(char* out, size_t n, std::chrono::steady_clock::time_point deadline);
  char query(int v1_type) const;  // the byte of a torch 1.x query type in this protocol

  std::string where_;
  std::chrono::milliseconds timeout_;
  int fd_ = -1;
  int protocol_ = 1;
};

}  // namespace fanout::distributed
