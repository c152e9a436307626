#include "matmul_shape.h"

#include "strata/error.h"

namespace strata::cpu {

MatmulShape matmulShape(const Shape& a, const Shape& b) {
  // 1-D operands are promoted: A [K] -> [1, K], B [K] -> [K, 1]; the added dims are dropped from the output.
  Shape am = a.size() == 1 ? Shape{1, a[0]} : a;
  Shape bm = b.size() == 1 ? Shape{b[0], 1} : b;
  MatmulShape s;
  s.m = am[am.size() - 2];
  s.k = am.back();
  s.n = bm.back();
  if (bm[bm.size() - 2] != s.k) {
    fail("inner dimensions differ: A{} has K = {} but B{} has K = {}", shapeToString(a), s.k, shapeToString(b),
         bm[bm.size() - 2]);
  }
  s.batchA.assign(am.begin(), am.end() - 2);
  s.batchB.assign(bm.begin(), bm.end() - 2);
  s.batch = broadcastShapes(s.batchA, s.batchB);
  while (s.batchA.size() < s.batch.size())
    s.batchA.insert(s.batchA.begin(), 1);
  while (s.batchB.size() < s.batch.size())
    s.batchB.insert(s.batchB.begin(), 1);
  s.output = s.batch;
  if (a.size() > 1)
    s.output.push_back(s.m);
  if (b.size() > 1)
    s.output.push_back(s.n);
  return s;
}

}  // namespace strata::cpu
