// DataLoader: llm.c packing (windows of B*T+1 tokens advancing by B*T, epochs,
// seeded shuffles that visit each window once), resuming from a LoaderState, and
// packing off (one padded document per row, PAD targets ignored).

#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "apps/data/data_loader.h"
#include "apps/data/tokenizer.h"
#include "engine/core/check.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using namespace fanout::data;
using fanout::test::error_of;

namespace {
constexpr int32_t kIgnore = -100;

// tokens[i] = i, so a batch's first input says where its window starts.
TokenData counting(int64_t n) {
  TokenData d;
  d.path = "count.bin";
  d.tokens.resize(n);
  std::iota(d.tokens.begin(), d.tokens.end(), 0);
  d.from_bin = true;
  return d;
}

TokenData documents(const std::vector<std::string>& docs) {
  TokenData d;
  d.path = "docs.txt";
  for (const std::string& s : docs) d.documents.push_back(byte_encode(s));
  for (const auto& doc : d.documents) {
    d.tokens.push_back(kBot);
    d.tokens.insert(d.tokens.end(), doc.begin(), doc.end());
    d.tokens.push_back(kEot);
  }
  return d;
}

bool same(const Batch& a, const Batch& b) {
  return a.B == b.B && a.T == b.T && a.inputs == b.inputs && a.targets == b.targets;
}
}  // namespace

TEST_CASE("packed batches are consecutive windows with targets shifted by one") {
  const int64_t B = 3, T = 5, BT = B * T;
  TokenData d = counting(4 * BT + 1);  // exactly 4 windows
  DataLoader loader(d, B, T, true, false, 0, kIgnore);
  CHECK(loader.batches_per_epoch() == 4);
  for (int64_t k = 0; k < 4; ++k) {
    CAPTURE(k);
    CHECK(loader.state().epoch == 0);
    CHECK(loader.state().index == k);
    Batch b = loader.next();
    CHECK(b.B == B);
    CHECK(b.T == T);
    for (int64_t i = 0; i < BT; ++i) {
      CHECK(b.inputs[i] == k * BT + i);
      CHECK(b.targets[i] == k * BT + i + 1);
    }
    CHECK(b.counted() == BT);
  }
  // The next would not fit: a new epoch from the start.
  CHECK(loader.state().epoch == 1);
  CHECK(loader.state().index == 0);
  CHECK(loader.next().inputs[0] == 0);
  // One token fewer and the last window lacks its final target.
  TokenData short_by_one = counting(4 * BT);
  CHECK(DataLoader(short_by_one, B, T, true, false, 0, kIgnore).batches_per_epoch() == 3);
}

TEST_CASE("packing refuses data shorter than one batch") {
  TokenData d = counting(15);  // B*T + 1 = 16 are needed
  std::string msg;
  try {
    DataLoader(d, 3, 5, true, false, 0, kIgnore);
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("count.bin: 15 tokens are fewer than one batch of 3 x 5 + 1") == 0);
  TokenData enough = counting(16);
  CHECK(DataLoader(enough, 3, 5, true, false, 0, kIgnore).batches_per_epoch() == 1);
  CHECK_THROWS_AS(DataLoader(enough, 0, 5, true, false, 0, kIgnore), Error);
  CHECK_THROWS_AS(DataLoader(enough, 3, 0, true, false, 0, kIgnore), Error);
}

TEST_CASE("shuffle visits every window once per epoch in an order fixed by seed and epoch") {
  const int64_t B = 2, T = 3, BT = B * T, W = 20;
  TokenData d = counting(W * BT + 1);
  DataLoader a(d, B, T, true, true, 99, kIgnore), b(d, B, T, true, true, 99, kIgnore);
  DataLoader other(d, B, T, true, true, 100, kIgnore);
  std::vector<std::vector<int64_t>> orders;
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order, order_b, order_other;
    for (int64_t i = 0; i < W; ++i) {
      Batch x = a.next();
      CHECK(x.inputs[0] % BT == 0);
      for (int64_t j = 0; j < BT; ++j) CHECK(x.targets[j] == x.inputs[j] + 1);
      order.push_back(x.inputs[0] / BT);
      order_b.push_back(b.next().inputs[0] / BT);
      order_other.push_back(other.next().inputs[0] / BT);
    }
    CHECK(order == order_b);
    CHECK(order != order_other);
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(W);
    std::iota(all.begin(), all.end(), 0);
    CHECK(sorted == all);
    orders.push_back(order);
  }
  CHECK(orders[0] != orders[1]);  // a fresh permutation each epoch
  CHECK(orders[1] != orders[2]);
  std::vector<int64_t> identity(W);
  std::iota(identity.begin(), identity.end(), 0);
  CHECK(orders[0] != identity);
}

TEST_CASE("set_state and batch_at reproduce what next returns") {
  for (bool shuffle : {false, true}) {
    CAPTURE(shuffle);
    TokenData d = counting(7 * 8 + 1);
    DataLoader a(d, 2, 4, true, shuffle, 5, kIgnore);
    std::vector<Batch> seen;
    std::vector<LoaderState> states;
    for (int i = 0; i < 17; ++i) {  // two and a bit epochs of 7
      states.push_back(a.state());
      seen.push_back(a.next());
    }
    for (int i = 0; i < 17; ++i) {
      CAPTURE(i);
      CHECK(same(a.batch_at(states[i].epoch, states[i].index), seen[i]));
    }
    DataLoader b(d, 2, 4, true, shuffle, 5, kIgnore);
    b.set_state(states[9]);
    for (int i = 9; i < 17; ++i) CHECK(same(b.next(), seen[i]));
    CHECK(b.state().epoch == a.state().epoch);
    CHECK(b.state().index == a.state().index);
    CHECK_THROWS_AS(b.set_state({0, 7}), Error);
    CHECK_THROWS_AS(b.set_state({-1, 0}), Error);
    CHECK_THROWS_AS(b.set_state({0, -1}), Error);
  }
}

TEST_CASE("packing off gives one BOT doc EOT row per document padded with ignored PAD targets") {
  TokenData d = documents({"ab", "abcdefghij", "", "xyz"});
  // split_documents never makes an empty document; one here still pads cleanly.
  const int64_t T = 6;
  DataLoader loader(d, 2, T, false, false, 0, kIgnore);
  CHECK(loader.batches_per_epoch() == 2);
  Batch b = loader.next();
  // row 0: [BOT a b EOT PAD PAD PAD] -> inputs [BOT a b EOT PAD PAD], targets [a b EOT - - -]
  std::vector<int32_t> in0 = {kBot, 'a', 'b', kEot, kPad, kPad};
  std::vector<int32_t> tg0 = {'a', 'b', kEot, kIgnore, kIgnore, kIgnore};
  // row 1: the long document is cut to T + 1 tokens: [BOT a b c d e f]
  std::vector<int32_t> in1 = {kBot, 'a', 'b', 'c', 'd', 'e'};
  std::vector<int32_t> tg1 = {'a', 'b', 'c', 'd', 'e', 'f'};
  CHECK(std::vector<int32_t>(b.inputs.begin(), b.inputs.begin() + T) == in0);
  CHECK(std::vector<int32_t>(b.targets.begin(), b.targets.begin() + T) == tg0);
  CHECK(std::vector<int32_t>(b.inputs.begin() + T, b.inputs.end()) == in1);
  CHECK(std::vector<int32_t>(b.targets.begin() + T, b.targets.end()) == tg1);
  CHECK(b.counted() == 3 + 6);
  Batch c = loader.next();
  std::vector<int32_t> tg2 = {kEot, kIgnore, kIgnore, kIgnore, kIgnore, kIgnore};
  CHECK(std::vector<int32_t>(c.targets.begin(), c.targets.begin() + T) == tg2);
  CHECK(c.inputs[T + 3] == 'z');
  CHECK(c.targets[T + 3] == kEot);
  CHECK(loader.state().epoch == 1);
  // A document that fits T + 1 exactly has no padding and its EOT as the last target.
  TokenData exact = documents({"abcde"});
  Batch e = DataLoader(exact, 1, T, false, false, 0, kIgnore).next();
  CHECK(e.targets.back() == kEot);
  CHECK(e.counted() == T);
}

TEST_CASE("packing off needs enough documents from a text file") {
  TokenData bin = counting(100);
  CHECK_THROWS_AS(DataLoader(bin, 1, 4, false, false, 0, kIgnore), Error);
  TokenData d = documents({"a", "b", "c"});
  CHECK_THROWS_AS(DataLoader(d, 4, 4, false, false, 0, kIgnore), Error);
  DataLoader three(d, 3, 4, false, false, 0, kIgnore);
  CHECK(three.batches_per_epoch() == 1);
  DataLoader two(d, 2, 4, false, false, 0, kIgnore);  // the third document is left over
  CHECK(two.batches_per_epoch() == 1);
}

TEST_CASE("a saved position maps onto batches of another size only at a batch boundary") {
  TokenData d = counting(4097);                      // 4096 windows of one token, + 1
  DataLoader now(d, 4, 8, true, false, 0, kIgnore);  // 32-token batches: 128 per epoch
  // Saved by 2 x 8 batches at index 6: token 96, batch 3 of 32 tokens.
  LoaderState s = now.state_from({1, 6}, 2, 8);
  CHECK(s.epoch == 1);
  CHECK(s.index == 3);
  CHECK(now.batch_at(s.epoch, s.index).inputs[0] == 96);
  // Token 80 is not a multiple of 32: refused, naming both geometries.
  std::string why = error_of([&] { now.state_from({0, 5}, 2, 8); });
  CHECK(why.find("token 80 of its epoch, which is not a boundary of batches of 4 x 8") !=
        std::string::npos);
  // Other tokens per row, same token position: 16 x 2 batches at index 3 = token 96.
  CHECK(now.state_from({0, 3}, 16, 2).index == 3);
  // The same geometry passes through untouched.
  CHECK(now.state_from({2, 7}, 4, 8).index == 7);
  // Shuffled batches of another size visit other data: refused.
  DataLoader shuffled(d, 4, 8, true, true, 1, kIgnore);
  CHECK(error_of([&] { shuffled.state_from({0, 2}, 2, 8); }).find("shuffled") != std::string::npos);
  // Past the new epoch's last batch: the next epoch starts.
  TokenData longer = counting(5097);
  DataLoader big(longer, 32, 32, true, false, 0, kIgnore);  // 1024-token batches: 4 per epoch
  LoaderState end = big.state_from({0, 128}, 1, 32);        // token 4096: no batch left
  CHECK(end.epoch == 1);
  CHECK(end.index == 0);
}

TEST_CASE("a batch whose token count overflows is refused, not divided by zero") {
  TokenData d = counting(100);
  // 2^32 x 2^32 wraps to 0 in 64 bits: a plain product would divide by zero.
  std::string why =
      error_of([&] { DataLoader(d, int64_t{1} << 32, int64_t{1} << 32, true, false, 0, kIgnore); });
  CHECK(why.find("does not fit in 64 bits") != std::string::npos);
}
