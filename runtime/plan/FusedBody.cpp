//===- FusedBody.cpp - The elementwise program of a `fused` step ----------===//

#include "runtime/plan/FusedBody.h"

#include <cctype>

namespace infer::plan {

namespace {
constexpr std::pair<ElementwiseOp, std::string_view> kOpNames[] = {
    {ElementwiseOp::kAdd, "add"},
    {ElementwiseOp::kMul, "mul"},
    {ElementwiseOp::kSilu, "silu"},
    {ElementwiseOp::kGeluTanh, "gelu_tanh"},
    {ElementwiseOp::kSiluMul, "silu_mul"},
    {ElementwiseOp::kGelu, "gelu"},
};
} // namespace

std::string_view elementwiseOpName(ElementwiseOp op) {
  for (const auto &[o, name] : kOpNames)
    if (o == op)
      return name;
  return "?";
}

std::optional<ElementwiseOp> parseElementwiseOp(std::string_view name) {
  for (const auto &[o, n] : kOpNames)
    if (n == name)
      return o;
  return std::nullopt;
}

int elementwiseArity(ElementwiseOp op) {
  return op == ElementwiseOp::kSilu || op == ElementwiseOp::kGeluTanh ||
                 op == ElementwiseOp::kGelu
             ? 1
             : 2;
}

void setFusedBody(const FusedBody &body, Step &step) {
  std::string text;
  for (const FusedInstruction &instr : body.instructions) {
    if (!text.empty())
      text += "; ";
    text += std::string(elementwiseOpName(instr.op)) + "(";
    for (size_t i = 0; i < instr.args.size(); ++i)
      text += (i ? ", " : "") + std::to_string(instr.args[i]);
    text += ")";
  }
  step.attrs["body"] = text;
  step.attrs["yields"] =
      std::vector<int64_t>(body.yields.begin(), body.yields.end());
}

namespace {

/// A cursor over the body text: `op(arg, ...); op(arg, ...)`.
class BodyParser {
public:
  explicit BodyParser(std::string_view text) : text_(text) {}

  bool atEnd() {
    skipSpaces();
    return pos_ == text_.size();
  }
  bool consume(char c) {
    skipSpaces();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  std::string_view identifier() {
    skipSpaces();
    size_t begin = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
            text_[pos_] == '_'))
      ++pos_;
    return text_.substr(begin, pos_ - begin);
  }
  std::optional<int> integer() {
    skipSpaces();
    size_t begin = pos_;
    int value = 0;
    while (pos_ < text_.size() && pos_ - begin < 9 &&
           std::isdigit(static_cast<unsigned char>(text_[pos_])))
      value = value * 10 + (text_[pos_++] - '0');
    if (pos_ == begin)
      return std::nullopt;
    return value;
  }

private:
  void skipSpaces() {
    while (pos_ < text_.size() &&
           std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

} // namespace

StatusOr<FusedBody> getFusedBody(const Step &step) {
  INFER_ASSIGN_OR_RETURN(std::string text, step.getString("body"));
  auto error = [&](const std::string &what) {
    return invalidArgument("fused step body '" + text + "': " + what);
  };
  FusedBody body;
  body.numInputs = static_cast<int>(step.operands.size());
  BodyParser parser(text);
  while (!parser.atEnd()) {
    if (!body.instructions.empty() && !parser.consume(';'))
      return error("expected ';' between instructions");
    std::string_view name = parser.identifier();
    std::optional<ElementwiseOp> op = parseElementwiseOp(name);
    if (!op)
      return error("unknown op '" + std::string(name) + "'");
    if (!parser.consume('('))
      return error("expected '(' after '" + std::string(name) + "'");
    FusedInstruction instr;
    instr.op = *op;
    while (!parser.consume(')')) {
      if (!instr.args.empty() && !parser.consume(','))
        return error("expected ',' or ')' in the arguments of '" +
                     std::string(name) + "'");
      std::optional<int> arg = parser.integer();
      if (!arg || *arg >= body.numRegisters())
        return error("instruction " + std::to_string(body.instructions.size()) +
                     " reads a register that is not defined before it");
      instr.args.push_back(*arg);
    }
    if (static_cast<int>(instr.args.size()) != elementwiseArity(*op))
      return error("'" + std::string(name) + "' takes " +
                   std::to_string(elementwiseArity(*op)) + " arguments");
    body.instructions.push_back(std::move(instr));
  }
  if (body.instructions.empty())
    return error("no instructions");

  auto yields = step.attrs.find("yields");
  const auto *ids = yields == step.attrs.end()
                        ? nullptr
                        : std::get_if<std::vector<int64_t>>(&yields->second);
  if (!ids)
    return error("attribute 'yields' must be a list of registers");
  if (ids->size() != step.results.size())
    return error("expected one yielded register per result (" +
                 std::to_string(step.results.size()) + "), got " +
                 std::to_string(ids->size()));
  for (int64_t id : *ids) {
    if (id < 0 || id >= body.numRegisters())
      return error("yields register " + std::to_string(id) +
                   " which is not defined");
    body.yields.push_back(static_cast<int>(id));
  }
  return body;
}

} // namespace infer::plan
