#include "rendezvous/asio_io.h"

#include <fmt/format.h>

namespace rankcheck {

ReadError read_error(std::error_code ec, bool mid, size_t got) {
  if (ec == asio::error::eof) {
    return {{mid ? "connection closed mid-frame" : "connection closed", Fault::kClosed}, got};
  }
  return {{fmt::format("recv: {}", ec.message()), Fault::kSystem}, got};
}

void Outbox::push(std::vector<uint8_t> frame) {
  push(std::make_shared<const std::vector<uint8_t>>(std::move(frame)));
}

void Outbox::clear() {
  for (size_t i = head_ + in_write_; i < queue_.size(); ++i)
    bytes_ -= queue_[i]->size();
  queue_.erase(queue_.begin() + head_ + in_write_, queue_.end());
  // An idle connection keeps no allocation: the master holds 100k of them waiting.
  if (empty()) {
    std::vector<Bytes>().swap(queue_);
    head_ = 0;
  }
}

void Outbox::written(std::error_code ec) {
  // Every frame of the write goes, written or not (an error ends the connection).
  size_t end = ec ? queue_.size() : head_ + in_write_;
  for (size_t i = head_; i < end; ++i)
    bytes_ -= queue_[i]->size();
  head_ = static_cast<uint32_t>(end);
  in_write_ = 0;
  if (empty()) return clear();
  // The frames written go once they are as many as those left: each frame is
  // moved once on average, whether one frame is written at a time or 256.
  if (head_ >= queue_.size() - head_) {
    queue_.erase(queue_.begin(), queue_.begin() + head_);
    head_ = 0;
  }
}

}  // namespace rankcheck
