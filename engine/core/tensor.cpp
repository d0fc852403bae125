#include "engine/core/tensor.h"

#include <cstring>

#include "engine/core/cuda_runtime.h"
#include "engine/core/stream.h"

namespace fanout {

// --- Storage ----------------------------------------------------------------

Storage::Storage(Device device, size_t bytes, MemTag tag)
    : device_(device), bytes_(bytes), tag_(tag) {
  data_ = allocator_for(device).allocate(bytes, tag);
}

Storage::~Storage() {
  allocator_for(device_).deallocate(data_, bytes_, tag_);
}

// --- shapes -----------------------------------------------------------------

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// --- Tensor -----------------------------------------------------------------

Tensor Tensor::empty(Shape shape, DType dtype, Device device, MemTag tag) {
  for (int64_t d : shape) FANOUT_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.storage_ = std::make_shared<Storage>(device, t.nbytes(), tag);
  return t;
}

Device Tensor::device() const {
  FANOUT_ASSERT(defined(), "device() of an undefined tensor");
  return storage_->device();
}

int64_t Tensor::size(int64_t d) const {
  FANOUT_ASSERT(d >= 0 && d < dim(), "dimension ", d, " out of range for ", str());
  return shape_[d];
}

void* Tensor::raw() const {
  FANOUT_ASSERT(defined(), "data of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  FANOUT_ASSERT(dim() >= 1, "slice of a 0-d tensor");
  FANOUT_ASSERT(0 <= begin && begin <= end && end <= shape_[0], "slice [", begin, ", ", end,
                ") out of range for ", str());
  Tensor t = *this;
  int64_t row = numel() / std::max<int64_t>(shape_[0], 1);
  t.offset_ += static_cast<size_t>(begin * row) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::view(int64_t element_offset, Shape shape) const {
  FANOUT_ASSERT(element_offset >= 0 && element_offset + shape_numel(shape) <= numel(), "view of ",
                shape_str(shape), " at ", element_offset, " out of range for ", str());
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(element_offset) * dtype_size(dtype_);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  FANOUT_ASSERT(shape_numel(shape) == numel(), "reshape ", str(), " to ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " on " + device().str();
}

// --- copies -----------------------------------------------------------------

void tensor_copy(Stream& stream, const Tensor& dst, const Tensor& src) {
  FANOUT_ASSERT(dst.dtype() == src.dtype() && dst.numel() == src.numel(), "tensor_copy ", src.str(),
                " -> ", dst.str());
  size_t bytes = src.nbytes();
  if (bytes == 0) return;
  Device dd = dst.device(), sd = src.device();
  if (dd.is_cpu() && sd.is_cpu()) {
    FANOUT_ASSERT(stream.device().is_cpu(), "CPU copy on ", stream.name());
    // Captured tensors keep both storages alive until the copy ran.
    stream.enqueue([dst, src, bytes] { std::memcpy(dst.raw(), src.raw(), bytes); });
    return;
  }
  FANOUT_ASSERT(stream.device().is_cuda(), "copy ", src.str(), " -> ", dst.str(), " on CPU stream ",
                stream.name());
  void* s = stream.cuda_handle();
  if (sd.is_cpu()) {
    cuda_memcpy_async(dst.raw(), src.raw(), bytes, CudaCopy::host_to_device, s);
  } else if (dd.is_cpu()) {
    cuda_memcpy_async(dst.raw(), src.raw(), bytes, CudaCopy::device_to_host, s);
  } else if (dd.index == sd.index) {
    cuda_memcpy_async(dst.raw(), src.raw(), bytes, CudaCopy::device_to_device, s);
  } else {
    cuda_memcpy_peer_async(dst.raw(), dd.index, src.raw(), sd.index, bytes, s);
  }
}

void tensor_copy_rows(Stream& stream, const Tensor& dst, int64_t dst_ld, const Tensor& src,
                      int64_t src_ld, int64_t rows, int64_t cols) {
  FANOUT_ASSERT(rows >= 0 && cols >= 0 && dst_ld >= cols && src_ld >= cols,
                "tensor_copy_rows: rows ", rows, " cols ", cols, " lds ", dst_ld, ", ", src_ld);
  if (rows == 0 || cols == 0) return;
  FANOUT_ASSERT(dst.dtype() == src.dtype() && dst.device() == src.device() &&
                    src.device() == stream.device() && dst.numel() >= (rows - 1) * dst_ld + cols &&
                    src.numel() >= (rows - 1) * src_ld + cols,
                "tensor_copy_rows ", src.str(), " -> ", dst.str(), " on ", stream.name());
  const size_t e = dtype_size(src.dtype());
  if (stream.device().is_cpu()) {
    stream.enqueue([=] {
      auto* d = static_cast<char*>(dst.raw());
      const auto* s = static_cast<const char*>(src.raw());
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(d + r * dst_ld * e, s + r * src_ld * e, cols * e);
    });
    return;
  }
  cuda_memcpy_2d_async(dst.raw(), dst_ld * e, src.raw(), src_ld * e, cols * e, rows,
                       stream.cuda_handle());
}

Tensor tensor_from_host(Stream& stream, const void* data, Shape shape, DType dtype, Device device,
                        MemTag tag) {
  Tensor t = Tensor::empty(std::move(shape), dtype, device, tag);
  tensor_upload(stream, t, data);
  return t;
}

void tensor_upload(Stream& stream, const Tensor& dst, const void* data) {
  if (dst.nbytes() == 0) return;  // an empty piece may come with a null data
  if (dst.device().is_cpu()) {
    stream.synchronize();  // nothing queued may still be using dst
    std::memcpy(dst.raw(), data, dst.nbytes());
  } else {
    cuda_memcpy_async(dst.raw(), data, dst.nbytes(), CudaCopy::host_to_device,
                      stream.cuda_handle());
    stream.synchronize();
  }
}

void tensor_to_host(Stream& stream, const Tensor& src, void* out) {
  if (src.device().is_cuda() && src.nbytes() > 0) {
    cuda_memcpy_async(out, src.raw(), src.nbytes(), CudaCopy::device_to_host, stream.cuda_handle());
  }
  stream.synchronize();
  // An empty piece may come with a null out: memcpy's arguments must not be null.
  if (src.device().is_cpu() && src.nbytes() > 0) std::memcpy(out, src.raw(), src.nbytes());
}

}  // namespace fanout
