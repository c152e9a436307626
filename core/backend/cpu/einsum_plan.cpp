#include "einsum_plan.h"

#include <fmt/format.h>

#include "strata/error.h"

namespace strata::cpu::einsum {

namespace {

bool holds(const std::string& letters, char c) {
  return letters.find(c) != std::string::npos;
}

// An intermediate: a value and the letter of each of its dims (no repeats).
struct Term {
  int value = 0;
  std::string letters;
};

class Planner {
 public:
  Planner(const EinsumEquation& equation, const std::vector<Shape>& shapes)
      : equation_(equation), sizes_(einsumLetterSizes(equation, shapes)), operands_(static_cast<int>(shapes.size())) {
    plan_.valueShapes = shapes;
  }

  Plan run() {
    std::vector<Term> terms;
    for (int i = 0; i < operands_; ++i)
      terms.push_back(prepare(i));
    // Letters only one operand holds and the output does not: summed before anything else reads that operand.
    for (std::size_t i = 0; i < terms.size(); ++i) {
      std::string others = equation_.output;
      for (std::size_t j = 0; j < terms.size(); ++j) {
        if (j != i)
          others += terms[j].letters;
      }
      terms[i] = sumAway(terms[i], others);
    }
    Term result = terms[0];
    for (std::size_t i = 1; i < terms.size(); ++i) {
      std::string needed = equation_.output;
      for (std::size_t j = i + 1; j < terms.size(); ++j)
        needed += terms[j].letters;
      result = contract(result, terms[i], needed, i + 1 == terms.size());
    }
    result = sumAway(result, equation_.output);
    if (result.letters != equation_.output)
      result = permute(result, equation_.output);
    plan_.result = result.value;
    plan_.resultStep = -1;
    for (int v = result.value; v >= operands_;) {
      const Step& step = plan_.steps[static_cast<std::size_t>(v - operands_)];
      if (step.kind != StepKind::Reshape) {
        plan_.resultStep = v - operands_;
        break;
      }
      v = step.inputs[0];
    }
    return std::move(plan_);
  }

 private:
  Shape shapeOf(const std::string& letters) const {
    Shape shape;
    for (char c : letters)
      shape.push_back(sizes_.at(c));
    return shape;
  }

  std::int64_t count(const std::string& letters) const { return numElements(shapeOf(letters)); }

  int add(Step step) {
    plan_.valueShapes.push_back(step.shape);
    plan_.steps.push_back(std::move(step));
    return static_cast<int>(plan_.valueShapes.size()) - 1;
  }

  // Diagonals of repeated letters, then the size-1 dims that broadcast dropped.
  Term prepare(int operand) {
    Term term{operand, equation_.inputs[static_cast<std::size_t>(operand)]};
    const Shape shape = plan_.valueShapes[static_cast<std::size_t>(operand)];
    std::string unique;
    for (char c : term.letters) {
      if (!holds(unique, c))
        unique.push_back(c);
    }
    if (unique.size() != term.letters.size()) {
      const std::vector<std::int64_t> strides = contiguousStrides(shape);
      Step step;
      step.kind = StepKind::Diagonal;
      step.inputs = {term.value};
      for (char c : unique) {
        std::int64_t stride = 0;
        for (std::size_t d = 0; d < term.letters.size(); ++d) {
          if (term.letters[d] == c)
            stride += strides[d];
        }
        step.shape.push_back(shape[term.letters.find(c)]);
        step.viewStrides.push_back(stride);
      }
      term = Term{add(std::move(step)), unique};
    }
    const Shape current = plan_.valueShapes[static_cast<std::size_t>(term.value)];
    std::string kept;
    Shape keptShape;
    for (std::size_t d = 0; d < term.letters.size(); ++d) {
      const char c = term.letters[d];
      if (current[d] == 1 && sizes_.at(c) != 1)
        continue;  // broadcast: the letter's size comes from the other operands
      kept.push_back(c);
      keptShape.push_back(current[d]);
    }
    if (kept.size() != term.letters.size()) {
      Step step;
      step.kind = StepKind::Reshape;
      step.inputs = {term.value};
      step.shape = keptShape;
      term = Term{add(std::move(step)), kept};
    }
    return term;
  }

  // Sums the letters of `term` that `keep` does not hold.
  Term sumAway(const Term& term, const std::string& keep) {
    Step step;
    step.kind = StepKind::Sum;
    step.inputs = {term.value};
    std::string kept;
    for (std::size_t d = 0; d < term.letters.size(); ++d) {
      if (holds(keep, term.letters[d])) {
        kept.push_back(term.letters[d]);
      } else {
        step.axes.push_back(static_cast<std::int64_t>(d));
      }
    }
    if (step.axes.empty())
      return term;
    step.shape = shapeOf(kept);
    return Term{add(std::move(step)), kept};
  }

  Term permute(const Term& term, const std::string& order) {
    if (term.letters == order)
      return term;
    Step step;
    step.kind = StepKind::Permute;
    step.inputs = {term.value};
    for (char c : order)
      step.perm.push_back(static_cast<std::int64_t>(term.letters.find(c)));
    step.shape = shapeOf(order);
    return Term{add(std::move(step)), order};
  }

  static std::string select(const std::string& letters, const std::string& in, bool wanted) {
    std::string out;
    for (char c : letters) {
      if (holds(in, c) == wanted)
        out.push_back(c);
    }
    return out;
  }

  Term contract(Term a, Term b, const std::string& needed, bool last) {
    a = sumAway(a, b.letters + needed);
    b = sumAway(b, a.letters + needed);
    const std::string shared = select(a.letters, b.letters, true);
    const std::string batchA = select(shared, needed, true);
    const std::string contractedA = select(shared, needed, false);
    const std::string sharedB = select(b.letters, a.letters, true);
    const std::string batchB = select(sharedB, needed, true);
    const std::string contractedB = select(sharedB, needed, false);
    struct Choice {
      bool swap = false;
      std::string batch, contracted;
      std::int64_t cost = -1;
    } best;
    for (bool swap : {false, true}) {
      const Term& left = swap ? b : a;
      const Term& right = swap ? a : b;
      const std::string leftOwn = select(left.letters, right.letters, false);
      const std::string rightOwn = select(right.letters, left.letters, false);
      for (const std::string* batch : {&batchA, &batchB}) {
        for (const std::string* contracted : {&contractedA, &contractedB}) {
          std::int64_t cost = 0;
          if (left.letters != *batch + leftOwn + *contracted)
            cost += count(left.letters);
          if (right.letters != *batch + *contracted + rightOwn)
            cost += count(right.letters);
          if (last && *batch + leftOwn + rightOwn != equation_.output)
            cost += count(*batch + leftOwn + rightOwn);
          if (best.cost < 0 || cost < best.cost)
            best = Choice{swap, *batch, *contracted, cost};
        }
      }
    }
    const Term left = best.swap ? b : a;
    const Term right = best.swap ? a : b;
    const std::string leftOwn = select(left.letters, right.letters, false);
    const std::string rightOwn = select(right.letters, left.letters, false);
    const Term l = permute(left, best.batch + leftOwn + best.contracted);
    const Term r = permute(right, best.batch + best.contracted + rightOwn);
    Step step;
    step.kind = StepKind::Product;
    step.inputs = {l.value, r.value};
    step.batch = count(best.batch);
    step.m = count(leftOwn);
    step.k = count(best.contracted);
    step.n = count(rightOwn);
    const std::string letters = best.batch + leftOwn + rightOwn;
    step.shape = shapeOf(letters);
    return Term{add(std::move(step)), letters};
  }

  const EinsumEquation& equation_;
  std::map<char, std::int64_t> sizes_;
  int operands_ = 0;
  Plan plan_;
};

}  // namespace

Plan makePlan(const EinsumEquation& equation, const std::vector<Shape>& shapes) {
  return Planner(equation, shapes).run();
}

std::string describe(const Plan& plan) {
  std::string text;
  for (const Step& step : plan.steps) {
    std::string part;
    switch (step.kind) {
      case StepKind::Diagonal:
        part = "diagonal";
        break;
      case StepKind::Reshape:
        continue;
      case StepKind::Sum:
        part = "sum";
        break;
      case StepKind::Permute:
        part = "permute";
        break;
      case StepKind::Product:
        part = step.k == 1                  ? fmt::format("outer product {}x{}x{}", step.batch, step.m, step.n)
               : step.m == 1 && step.n == 1 ? fmt::format("dot products {}x{}", step.batch, step.k)
                                            : fmt::format("matmul {}x{}x{}x{}", step.batch, step.m, step.k, step.n);
        break;
    }
    text += text.empty() ? part : ", " + part;
  }
  return text.empty() ? "copy" : text;
}

}  // namespace strata::cpu::einsum
