// InProcessGroup. Every collective is two phases around two barriers:
//   publish: each rank copies its input (and its sizes) into its own staging slot;
//   barrier; check that the sizes agree; consume: each rank reads every slot, writes its output;
//   barrier (no slot is overwritten by the next collective before everyone has read it).
// A rank only ever writes its own slot, and only outside the read window, so slots need no lock.
// A rank that leaves a collective early (a failed check) has set the sticky failure first, and
// every collective checks it before publishing, so it never writes a slot others still read.
#include "parallel/communicator.h"

#include <omp.h>

#include <numeric>
#include <string>
#include <thread>

#include "parallel/rank_sync.h"

namespace gyre::parallel {

struct InProcessGroup::Shared {
  Shared(int n, std::chrono::milliseconds timeout) : n(n), sync(n, timeout), slots(n) {}

  const int n;
  RankSync sync;  // the barrier and the sticky failure: the first failure of any collective

  // Slot r is written by rank r in the publish phase only and read by all ranks in the consume
  // phase (the barrier between them orders the accesses).
  struct Slot {
    const char* op = "";
    std::vector<float> data;
    std::vector<int64_t> counts;
    int64_t size = 0;   // the size the rank declares (must agree across ranks)
    std::string error;  // a local precondition violation, reported by every rank
  };
  std::vector<Slot> slots;

  Status Broken() { return sync.Broken(); }
  Status Fail(Status s) { return sync.Fail(std::move(s)); }
  Status Barrier(int rank) { return sync.Barrier(rank, slots[rank].op); }
};

namespace {

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(InProcessGroup::Shared* g, int rank) : g_(g), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return g_->n; }

  Status AllReduceSum(std::span<float> data) override {
    GYRE_RETURN_IF_ERROR(g_->Broken());  // broken: leave the slots alone, others may be reading
    auto& me = Publish("AllReduceSum", static_cast<int64_t>(data.size()));
    me.data.assign(data.begin(), data.end());
    return Exchange([&] {
      for (size_t i = 0; i < data.size(); ++i) {
        float acc = g_->slots[0].data[i];
        for (int s = 1; s < g_->n; ++s) acc += g_->slots[s].data[i];
        data[i] = acc;
      }
    });
  }

  Status AllGather(std::span<const float> in, std::span<float> out) override {
    GYRE_RETURN_IF_ERROR(g_->Broken());  // broken: leave the slots alone, others may be reading
    auto& me = Publish("AllGather", static_cast<int64_t>(in.size()));
    if (out.size() != in.size() * g_->n) me.error = "AllGather: out.size() != size() * in.size()";
    me.data.assign(in.begin(), in.end());
    return Exchange([&] {
      for (int s = 0; s < g_->n; ++s) {
        std::copy(g_->slots[s].data.begin(), g_->slots[s].data.end(), &out[s * in.size()]);
      }
    });
  }

  Status ReduceScatterSum(std::span<const float> in, std::span<float> out) override {
    GYRE_RETURN_IF_ERROR(g_->Broken());  // broken: leave the slots alone, others may be reading
    auto& me = Publish("ReduceScatterSum", static_cast<int64_t>(in.size()));
    if (in.size() != out.size() * g_->n) me.error = "ReduceScatterSum: in.size() != size() * out.size()";
    me.data.assign(in.begin(), in.end());
    return Exchange([&] {
      const size_t base = static_cast<size_t>(rank_) * out.size();
      for (size_t i = 0; i < out.size(); ++i) {
        float acc = g_->slots[0].data[base + i];
        for (int s = 1; s < g_->n; ++s) acc += g_->slots[s].data[base + i];
        out[i] = acc;
      }
    });
  }

  Status AllToAllV(std::span<const float> send, std::span<const int64_t> send_counts, std::vector<float>* recv,
                   std::vector<int64_t>* recv_counts) override {
    GYRE_RETURN_IF_ERROR(g_->Broken());  // broken: leave the slots alone, others may be reading
    auto& me = Publish("AllToAllV", g_->n);  // sizes may differ; only the count vectors must agree
    if (static_cast<int>(send_counts.size()) != g_->n) {
      me.error = "AllToAllV: send_counts.size() != size()";
    } else if (std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0}) !=
               static_cast<int64_t>(send.size())) {
      me.error = "AllToAllV: send_counts do not sum to send.size()";
    }
    me.data.assign(send.begin(), send.end());
    me.counts.assign(send_counts.begin(), send_counts.end());
    return Exchange([&] {
      recv->clear();
      recv_counts->assign(g_->n, 0);
      for (int s = 0; s < g_->n; ++s) {
        const auto& slot = g_->slots[s];
        const int64_t off = std::accumulate(slot.counts.begin(), slot.counts.begin() + rank_, int64_t{0});
        (*recv_counts)[s] = slot.counts[rank_];
        recv->insert(recv->end(), slot.data.begin() + off, slot.data.begin() + off + slot.counts[rank_]);
      }
    });
  }

  Status Barrier() override {
    GYRE_RETURN_IF_ERROR(g_->Broken());  // broken: leave the slots alone, others may be reading
    Publish("Barrier", 0);
    return Exchange([] {});
  }

 private:
  InProcessGroup::Shared::Slot& Publish(const char* op, int64_t size) {
    auto& me = g_->slots[rank_];
    me.op = op;
    me.size = size;
    me.error.clear();
    return me;
  }

  // Barrier, agreement check, consume, barrier.
  template <typename Consume>
  Status Exchange(Consume consume) {
    GYRE_RETURN_IF_ERROR(g_->Barrier(rank_));
    const auto& first = g_->slots[0];
    for (int s = 0; s < g_->n; ++s) {
      const auto& slot = g_->slots[s];
      std::string why;
      if (!slot.error.empty()) {
        why = slot.error;
      } else if (std::string(slot.op) != first.op) {
        why = std::string("rank 0 called ") + first.op + " while this rank called " + slot.op;
      } else if (slot.size != first.size) {
        why = std::string(slot.op) + ": rank 0 passed " + std::to_string(first.size) + " elements, this rank " +
              std::to_string(slot.size);
      }
      if (!why.empty()) return g_->Fail(Status::InvalidArgument("rank " + std::to_string(s) + ": " + why));
    }
    consume();
    return g_->Barrier(rank_);
  }

  InProcessGroup::Shared* g_;
  int rank_;
};

}  // namespace

InProcessGroup::InProcessGroup(int n, std::chrono::milliseconds timeout)
    : shared_(std::make_unique<Shared>(n, timeout)) {
  for (int r = 0; r < n; ++r) ranks_.push_back(std::make_unique<InProcessCommunicator>(shared_.get(), r));
}

InProcessGroup::~InProcessGroup() = default;

std::unique_ptr<InProcessGroup> InProcessGroup::Create(int n, std::chrono::milliseconds timeout) {
  GYRE_CHECK(n >= 1);
  return std::unique_ptr<InProcessGroup>(new InProcessGroup(n, timeout));
}

int InProcessGroup::size() const { return shared_->n; }

Communicator& InProcessGroup::Rank(int r) { return *ranks_.at(r); }

void InProcessGroup::Abort(Status s) { (void)shared_->Fail(std::move(s)); }

Status InProcessGroup::status() const { return shared_->Broken(); }

Status RunOnRanks(int n, const std::function<Status(Communicator&)>& fn) {
  auto group = InProcessGroup::Create(n);
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      omp_set_num_threads(1);  // per-thread ICV: this rank's parallel regions run on its own thread
      results[r] = fn(group->Rank(r));
      if (!results[r].ok()) group->Abort(results[r].WithContext("rank " + std::to_string(r)));
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results)
    if (!s.ok()) return group->status();
  return Status();
}

}  // namespace gyre::parallel
