// Strata's Resize, ResizeGrad and Einsum CPU kernels on one shape each, timed through the op registry as a plan
// creates them (the fastest of fifteen calls after a warm-up: on a shared machine the slower ones measure the
// neighbours): the Strata side of bench/resize_einsum_speed.py, which times
// PyTorch's twins on the same shapes.
//
//   build/bench/strata_bench_resize_einsum_ops THREADS N C H W SCALE            # bilinear, NCHW and NHWC
//   build/bench/strata_bench_resize_einsum_ops THREADS einsum EQUATION SHAPE... # e.g. bhqd,bhkd->bhqk 8,8,256,64

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "strata/channels_last.h"
#include "strata/op_registry.h"
#include "strata/thread_pool.h"

namespace {

using namespace strata;

double fastestMs(const std::function<void()>& call) {
  call();
  double best = 1e300;
  for (int i = 0; i < 15; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

Tensor randomFloats(const Shape& shape) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t = Tensor::empty(DType::Float32, shape);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = dist(rng);
  return t;
}

// A kernel made once, as a plan makes it, and a call that runs it.
struct Prepared {
  std::unique_ptr<OpKernel> kernel;
  std::vector<Tensor> inputs;
  Tensor output;

  void run() {
    KernelContext ctx;
    for (const Tensor& t : inputs)
      ctx.inputs.push_back(t.defined() ? &t : nullptr);
    ctx.outputs = {&output};
    ctx.stream = &defaultStream(Device::cpu());
    kernel->compute(ctx);
  }
};

Prepared prepare(const std::string& type, std::vector<Tensor> inputs, const Attributes& attrs) {
  std::vector<InputInfo> infos;
  for (const Tensor& t : inputs)
    infos.push_back(t.defined() ? InputInfo{true, t.meta(), t.dtype() == DType::Float32 && t.rank() == 1 ? &t : nullptr}
                                : InputInfo{});
  const std::string node = type;
  const std::vector<TensorMeta> out =
      OpRegistry::instance().schema(type)->inferShapes(ShapeContext{infos, attrs, 1, node, type});
  Prepared p;
  p.kernel = (*OpRegistry::instance().kernel(type, DeviceType::CPU))(KernelInit{infos, out, attrs, node, true});
  p.inputs = std::move(inputs);
  p.output = Tensor::empty(out[0]);
  return p;
}

void resize(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, float scale) {
  Tensor scales = Tensor::empty(DType::Float32, {4});
  const float values[] = {1.0f, 1.0f, scale, scale};
  std::copy(values, values + 4, scales.data<float>());
  for (bool last : {false, true}) {
    Attributes attrs;
    attrs.set("mode", std::string("linear"));
    if (last)
      attrs.set("channels_last", std::int64_t{1});
    const Shape x = last ? Shape{n, h, w, c} : Shape{n, c, h, w};
    Prepared forward = prepare("Resize", {randomFloats(x), Tensor(), scales}, attrs);
    Attributes gradAttrs = attrs;
    gradAttrs.set("input_shape", x);
    Prepared backward = prepare("ResizeGrad", {randomFloats(forward.output.shape()), Tensor(), scales}, gradAttrs);
    std::printf("resize %s forward %.3f ms (%s), backward %.3f ms\n", last ? "nhwc" : "nchw",
                fastestMs([&] { forward.run(); }), forward.kernel->implementation().c_str(),
                fastestMs([&] { backward.run(); }));
  }
}

void einsum(const std::string& equation, const std::vector<Shape>& shapes) {
  std::vector<Tensor> inputs;
  for (const Shape& s : shapes)
    inputs.push_back(randomFloats(s));
  Attributes attrs;
  attrs.set("equation", equation);
  Prepared op = prepare("Einsum", inputs, attrs);
  std::printf("einsum %s %.3f ms (%s)\n", equation.c_str(), fastestMs([&] { op.run(); }),
              op.kernel->implementation().c_str());
}

Shape parseShape(const std::string& text) {
  Shape shape;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ','))
    shape.push_back(std::stoll(part));
  return shape;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s THREADS N C H W SCALE | THREADS einsum EQUATION SHAPE...\n", argv[0]);
    return 2;
  }
  ThreadPool::instance().setThreads(std::atoi(argv[1]));
  if (std::string(argv[2]) == "einsum") {
    std::vector<Shape> shapes;
    for (int i = 4; i < argc; ++i)
      shapes.push_back(parseShape(argv[i]));
    einsum(argv[3], shapes);
    return 0;
  }
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s THREADS N C H W SCALE\n", argv[0]);
    return 2;
  }
  resize(std::atoll(argv[2]), std::atoll(argv[3]), std::atoll(argv[4]), std::atoll(argv[5]),
         static_cast<float>(std::atof(argv[6])));
  return 0;
}
