#include <memory>
#include <string>
#include <utility>

#include "engine/engine.h"
#include "model/config.h"

namespace gyre {

namespace {

class NoGenerationEngine final : public Engine {
 public:
  NoGenerationEngine(ModelConfig config, int64_t max_model_len, std::string why)
      : config_(std::move(config)), why_(std::move(why)) {
    stats_.max_model_len = max_model_len;
  }
  Status Start() override { return Status::Ok(); }
  void Stop() override {}
  Result<RequestId> Submit(RequestParams, std::shared_ptr<RequestSink>) override {
    return Status::InvalidArgument(why_);
  }
  Result<RequestId> SubmitImported(RequestParams, ImportedSequence, std::shared_ptr<RequestSink>) override {
    return Status::InvalidArgument(why_);
  }
  void Cancel(RequestId) override {}
  EngineStats Stats() const override { return stats_; }
  const ModelConfig& config() const override { return config_; }

 private:
  const ModelConfig config_;
  const std::string why_;
  EngineStats stats_;
};

}  // namespace

std::unique_ptr<Engine> MakeNoGenerationEngine(ModelConfig config, int64_t max_model_len, std::string why) {
  return std::make_unique<NoGenerationEngine>(std::move(config), max_model_len, std::move(why));
}

}  // namespace gyre
