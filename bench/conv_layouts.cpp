// What oneDNN's convolutions cost on activations already in a given layout: forward, backward data and backward
// weights of each convolution shape a model has, without the reorders around them that Strata's plain NCHW
// activations need, plus the weight reorders a step still makes. It answers whether a layout pass (activations kept
// in oneDNN's blocked layouts between nodes) would beat the kernels Strata picks now: compare the totals with the
// Conv and ConvGrad rows of `strata train --profile` for the same model, batch and threads.
//
//   /usr/bin/python3 bench/conv_shapes.py model.onnx > shapes.txt
//   OMP_NUM_THREADS=2 build/bench/strata_bench_conv_layouts nChw8c shapes.txt   # or nChw16c, nhwc, nchw
//
// Shapes where oneDNN has no JIT kernel in that layout (a reference loop, seconds per call) are listed and left out
// of the totals: a layout pass would run them another way.

#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// Median of nine timed calls after one warm-up, in milliseconds.
double medianMs(const std::function<void()>& call, dnnl::stream& stream) {
  call();
  stream.wait();
  std::vector<double> times;
  for (int i = 0; i < 9; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call();
    stream.wait();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[4];
}

bool isJit(const std::string& implementation) {
  return implementation.find("jit") != std::string::npos || implementation.find("brg") != std::string::npos;
}

struct ConvShape {
  int count = 0;
  memory::dim n = 0, c = 0, h = 0, w = 0, k = 0, r = 0, s = 0, strideH = 1, strideW = 1, group = 1;
  memory::dims padBegin, padEnd;
};

bool parse(const std::string& line, ConvShape& shape) {
  long count, n, c, h, w, k, cg, r, s, sh, sw, p0, p1, p2, p3, g;
  if (std::sscanf(line.c_str(), "%ld %ld,%ld,%ld,%ld %ld,%ld,%ld,%ld %ld,%ld %ld,%ld,%ld,%ld %ld", &count, &n, &c, &h,
                  &w, &k, &cg, &r, &s, &sh, &sw, &p0, &p1, &p2, &p3, &g) != 16)
    return false;
  shape = {static_cast<int>(count), n, c, h, w, k, r, s, sh, sw, g, {p0, p1}, {p2, p3}};
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, Tag> layouts{
      {"nchw", Tag::nchw}, {"nhwc", Tag::nhwc}, {"nChw8c", Tag::nChw8c}, {"nChw16c", Tag::nChw16c}};
  if (argc != 3 || layouts.count(argv[1]) == 0) {
    std::fprintf(stderr, "usage: %s nchw|nhwc|nChw8c|nChw16c SHAPES_FILE (from bench/conv_shapes.py)\n", argv[0]);
    return 2;
  }
  const Tag layout = layouts.at(argv[1]);
  const memory::dim block = layout == Tag::nChw16c ? 16 : layout == Tag::nChw8c ? 8 : 1;
  std::ifstream in(argv[2]);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", argv[2]);
    return 2;
  }
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  double total[4] = {0, 0, 0, 0};  // forward, backward data, backward weights, weight reorders
  std::string line;
  while (std::getline(in, line)) {
    ConvShape v;
    if (!parse(line, v))
      continue;
    const auto f32 = memory::data_type::f32;
    const memory::dim oh = (v.h + v.padBegin[0] + v.padEnd[0] - v.r) / v.strideH + 1;
    const memory::dim ow = (v.w + v.padBegin[1] + v.padEnd[1] - v.s) / v.strideW + 1;
    // A first layer with 3 channels stays plain: blocks need whole groups of channels.
    const memory::desc src({v.n, v.c, v.h, v.w}, f32, v.c % block == 0 ? layout : Tag::nchw);
    const memory::desc dst({v.n, v.k, oh, ow}, f32, v.k % block == 0 ? layout : Tag::nchw);
    const memory::dims weightDims =
        v.group > 1 ? memory::dims{v.group, v.k / v.group, v.c / v.group, v.r, v.s} : memory::dims{v.k, v.c, v.r, v.s};
    const memory::desc anyWeights(weightDims, f32, Tag::any);
    const memory::desc plainWeights(weightDims, f32, v.group > 1 ? Tag::goihw : Tag::oihw);
    const memory::desc bias({v.k}, f32, Tag::x);
    const memory::dims strides{v.strideH, v.strideW};
    const auto direct = dnnl::algorithm::convolution_direct;
    const dnnl::convolution_forward::primitive_desc forwardPd(
        {dnnl::prop_kind::forward_training, direct, src, anyWeights, bias, dst, strides, v.padBegin, v.padEnd}, engine);
    const dnnl::convolution_backward_data::primitive_desc dataPd(
        {direct, src, anyWeights, dst, strides, v.padBegin, v.padEnd}, engine, forwardPd);
    const dnnl::convolution_backward_weights::primitive_desc weightsPd(
        {direct, src, anyWeights, bias, dst, strides, v.padBegin, v.padEnd}, engine, forwardPd);
    memory x(forwardPd.src_desc(), engine), w(forwardPd.weights_desc(), engine), b(forwardPd.bias_desc(), engine);
    memory y(forwardPd.dst_desc(), engine), wData(dataPd.weights_desc(), engine), dx(dataPd.diff_src_desc(), engine);
    memory dy(weightsPd.diff_dst_desc(), engine), dw(weightsPd.diff_weights_desc(), engine);
    memory db(weightsPd.diff_bias_desc(), engine), plain(plainWeights, engine), plainGrad(plainWeights, engine);
    dnnl::convolution_forward forward(forwardPd);
    dnnl::convolution_backward_data backwardData(dataPd);
    dnnl::convolution_backward_weights backwardWeights(weightsPd);
    const std::string names[3] = {forwardPd.impl_info_str(), dataPd.impl_info_str(), weightsPd.impl_info_str()};
    const bool jit = isJit(names[0]) && isJit(names[1]) && isJit(names[2]);
    std::printf("%d x %-46s %-16s %-16s %-16s", v.count, line.substr(line.find(' ') + 1).c_str(), names[0].c_str(),
                names[1].c_str(), names[2].c_str());
    if (!jit) {
      std::printf(" not JIT: left out\n");
      continue;
    }
    double t[4] = {0, 0, 0, 0};
    t[0] = medianMs(
        [&] {
          forward.execute(stream, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}});
        },
        stream);
    t[1] = medianMs(
        [&] {
          backwardData.execute(stream, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, wData}, {DNNL_ARG_DIFF_SRC, dx}});
        },
        stream);
    t[2] = medianMs(
        [&] {
          backwardWeights.execute(
              stream,
              {{DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, dw}, {DNNL_ARG_DIFF_BIAS, db}});
        },
        stream);
    // Per step the weights go into the forward's and the data gradient's layouts, and the gradient back out.
    const std::pair<memory*, memory*> reorders[3] = {{&plain, &w}, {&plain, &wData}, {&dw, &plainGrad}};
    for (const auto& [from, to] : reorders) {
      if (from->get_desc() != to->get_desc()) {
        dnnl::reorder reorder(*from, *to);
        t[3] += medianMs([&] { reorder.execute(stream, *from, *to); }, stream);
      }
    }
    std::printf(" fwd %7.3f  bwd data %7.3f  bwd weights %7.3f  weight reorders %6.3f ms\n", t[0], t[1], t[2], t[3]);
    for (int i = 0; i < 4; ++i)
      total[i] += v.count * t[i];
  }
  std::printf(
      "total (JIT shapes, times their count): forward %.2f, backward data %.2f, backward weights %.2f, "
      "weight reorders %.2f ms\n",
      total[0], total[1], total[2], total[3]);
  return 0;
}
