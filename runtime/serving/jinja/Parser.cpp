//===- Parser.cpp - The syntax tree of a Jinja template -------------------===//

#include "runtime/serving/jinja/Parser.h"

#include <algorithm>
#include <set>

namespace infer::serving::jinja {

namespace {

class Parser {
public:
  explicit Parser(const std::vector<Token> &tokens) : tokens_(tokens) {}

  StatusOr<Body> run() {
    Body body;
    std::string end;
    INFER_RETURN_IF_ERROR(parseBody(body, {}, end));
    if (peek().kind != TokenKind::kEnd)
      return error("unexpected '{% " + end + " %}'");
    return body;
  }

private:
  const Token &peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token &next() {
    const Token &t = peek();
    if (pos_ < tokens_.size() - 1)
      ++pos_;
    return t;
  }
  bool isOp(const char *op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOperator && peek(ahead).text == op;
  }
  bool isName(const char *name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
  }
  bool acceptOp(const char *op) {
    if (!isOp(op))
      return false;
    next();
    return true;
  }
  bool acceptName(const char *name) {
    if (!isName(name))
      return false;
    next();
    return true;
  }
  Status error(const std::string &message) const {
    return invalidArgument("line " + std::to_string(peek().line) + ": " +
                           message);
  }
  Status expectOp(const char *op) {
    if (acceptOp(op))
      return Status::ok();
    return error(std::string("expected '") + op + "', found '" + peek().text +
                 "'");
  }
  Status expectBlockEnd() {
    if (peek().kind == TokenKind::kBlockEnd) {
      next();
      return Status::ok();
    }
    return error("expected '%}', found '" + peek().text + "'");
  }
  StatusOr<std::string> expectName() {
    if (peek().kind != TokenKind::kName)
      return error("expected a name, found '" + peek().text + "'");
    return next().text;
  }

  /// Statements until one of `ends` (its keyword goes to `end`, the tag
  /// is consumed up to the keyword) or the end of the template.
  Status parseBody(Body &body, const std::set<std::string> &ends,
                   std::string &end) {
    while (peek().kind != TokenKind::kEnd) {
      const Token &t = peek();
      if (t.kind == TokenKind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.kind == TokenKind::kVariableBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = t.line;
        INFER_ASSIGN_OR_RETURN(s->expr, parseExpression());
        if (peek().kind != TokenKind::kVariableEnd)
          return error("expected '}}', found '" + peek().text + "'");
        next();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        const Token &keyword = peek(1);
        if (keyword.kind != TokenKind::kName)
          return error("expected a statement after '{%'");
        if (ends.count(keyword.text)) {
          next();
          end = next().text;
          return Status::ok();
        }
        next();
        INFER_RETURN_IF_ERROR(parseStatement(body));
      } else {
        return error("unexpected '" + t.text + "'");
      }
    }
    if (!ends.empty())
      return error("missing '{% " + *ends.rbegin() + " %}' at the end");
    return Status::ok();
  }

  Status parseStatement(Body &body) {
    Level level(nesting_);
    INFER_RETURN_IF_ERROR(checkNesting());
    const Token &keyword = next();
    auto s = std::make_unique<Stmt>();
    s->line = keyword.line;
    const std::string &k = keyword.text;
    std::string end;
    if (k == "if") {
      s->kind = Stmt::Kind::kIf;
      INFER_ASSIGN_OR_RETURN(ExprPtr cond, parseExpression());
      INFER_RETURN_IF_ERROR(expectBlockEnd());
      while (true) {
        Body branch;
        INFER_RETURN_IF_ERROR(
            parseBody(branch, {"elif", "else", "endif"}, end));
        s->branches.emplace_back(std::move(cond), std::move(branch));
        if (end == "endif")
          break;
        if (end == "else") {
          INFER_RETURN_IF_ERROR(expectBlockEnd());
          Body last;
          INFER_RETURN_IF_ERROR(parseBody(last, {"endif"}, end));
          s->branches.emplace_back(nullptr, std::move(last));
          break;
        }
        INFER_ASSIGN_OR_RETURN(cond, parseExpression());
        INFER_RETURN_IF_ERROR(expectBlockEnd());
      }
      INFER_RETURN_IF_ERROR(expectBlockEnd());
    } else if (k == "for") {
      s->kind = Stmt::Kind::kFor;
      do {
        INFER_ASSIGN_OR_RETURN(std::string target, expectName());
        s->targets.push_back(target);
      } while (acceptOp(","));
      if (!acceptName("in"))
        return error("expected 'in' in a for statement");
      INFER_ASSIGN_OR_RETURN(s->expr, parseTernary(/*allowCondition=*/false));
      if (acceptName("if")) {
        INFER_ASSIGN_OR_RETURN(s->filter, parseOr());
      }
      if (acceptName("recursive"))
        return error("unsupported Jinja construct 'for ... recursive'");
      INFER_RETURN_IF_ERROR(expectBlockEnd());
      INFER_RETURN_IF_ERROR(parseBody(s->body, {"else", "endfor"}, end));
      if (end == "else") {
        INFER_RETURN_IF_ERROR(expectBlockEnd());
        INFER_RETURN_IF_ERROR(parseBody(s->elseBody, {"endfor"}, end));
      }
      INFER_RETURN_IF_ERROR(expectBlockEnd());
    } else if (k == "set") {
      s->kind = Stmt::Kind::kSet;
      do {
        INFER_ASSIGN_OR_RETURN(std::string target, expectName());
        s->targets.push_back(target);
      } while (acceptOp(","));
      if (acceptOp(".")) {
        if (s->targets.size() != 1)
          return error("cannot set an attribute of several names");
        INFER_ASSIGN_OR_RETURN(s->attribute, expectName());
      }
      if (acceptOp("=")) {
        INFER_ASSIGN_OR_RETURN(s->expr, parseTuple());
        INFER_RETURN_IF_ERROR(expectBlockEnd());
      } else {
        INFER_RETURN_IF_ERROR(expectBlockEnd());
        INFER_RETURN_IF_ERROR(parseBody(s->body, {"endset"}, end));
        INFER_RETURN_IF_ERROR(expectBlockEnd());
      }
    } else if (k == "break" || k == "continue") {
      s->kind = k == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      INFER_RETURN_IF_ERROR(expectBlockEnd());
    } else if (k == "generation") {
      // HF's AssistantTracker marks assistant text; rendering is unchanged.
      INFER_RETURN_IF_ERROR(expectBlockEnd());
      INFER_RETURN_IF_ERROR(parseBody(body, {"endgeneration"}, end));
      return expectBlockEnd();
    } else if (k == "macro") {
      s->kind = Stmt::Kind::kMacro;
      INFER_ASSIGN_OR_RETURN(s->text, expectName());
      INFER_RETURN_IF_ERROR(expectOp("("));
      while (!acceptOp(")")) {
        INFER_ASSIGN_OR_RETURN(std::string param, expectName());
        ExprPtr fallback;
        if (acceptOp("=")) {
          INFER_ASSIGN_OR_RETURN(fallback, parseExpression());
        }
        s->params.emplace_back(param, std::move(fallback));
        if (!isOp(")"))
          INFER_RETURN_IF_ERROR(expectOp(","));
      }
      INFER_RETURN_IF_ERROR(expectBlockEnd());
      INFER_RETURN_IF_ERROR(parseBody(s->body, {"endmacro"}, end));
      INFER_RETURN_IF_ERROR(expectBlockEnd());
    } else {
      return invalidArgument("line " + std::to_string(keyword.line) +
                             ": unsupported Jinja construct '{% " + k + " %}'");
    }
    body.push_back(std::move(s));
    return Status::ok();
  }

  /// `e` with its operands in: its depth, checked against kMaxNesting
  /// (evaluating and destroying the tree recurse along it).
  StatusOr<ExprPtr> finish(ExprPtr e) {
    for (const ExprPtr &a : e->args)
      if (a)
        e->depth = std::max(e->depth, a->depth + 1);
    for (const auto &[name, a] : e->kwargs)
      e->depth = std::max(e->depth, a->depth + 1);
    if (e->depth > kMaxNesting)
      return invalidArgument("line " + std::to_string(e->line) +
                             ": an expression nested more than " +
                             std::to_string(kMaxNesting) + " deep");
    return e;
  }

  /// One more level of the parser's recursion (a block in a block, an
  /// expression in brackets or after an operator) while it lives.
  class Level {
  public:
    explicit Level(int &nesting) : nesting_(nesting) { ++nesting_; }
    ~Level() { --nesting_; }
    Level(const Level &) = delete;
    Level &operator=(const Level &) = delete;

  private:
    int &nesting_;
  };
  Status checkNesting() const {
    if (nesting_ <= kMaxNesting)
      return Status::ok();
    return error("blocks and expressions nested more than " +
                 std::to_string(kMaxNesting) + " deep");
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  /// `a, b` without brackets is a tuple (a list here).
  StatusOr<ExprPtr> parseTuple() {
    INFER_ASSIGN_OR_RETURN(ExprPtr first, parseExpression());
    if (!isOp(","))
      return first;
    ExprPtr list = make(Expr::Kind::kList, first->line);
    list->args.push_back(std::move(first));
    while (acceptOp(",")) {
      INFER_ASSIGN_OR_RETURN(ExprPtr item, parseExpression());
      list->args.push_back(std::move(item));
    }
    return finish(std::move(list));
  }

  StatusOr<ExprPtr> parseExpression() { return parseTernary(true); }

  StatusOr<ExprPtr> parseTernary(bool allowCondition) {
    Level level(nesting_);
    INFER_RETURN_IF_ERROR(checkNesting());
    INFER_ASSIGN_OR_RETURN(ExprPtr value, parseOr());
    while (allowCondition && isName("if")) {
      next();
      ExprPtr e = make(Expr::Kind::kTernary, value->line);
      INFER_ASSIGN_OR_RETURN(ExprPtr cond, parseOr());
      ExprPtr otherwise;
      if (acceptName("else")) {
        INFER_ASSIGN_OR_RETURN(otherwise, parseTernary(true));
      }
      e->args.push_back(std::move(value));
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(otherwise));
      INFER_ASSIGN_OR_RETURN(value, finish(std::move(e)));
    }
    return value;
  }

  StatusOr<ExprPtr> binary(ExprPtr left, std::string op, ExprPtr right) {
    ExprPtr e = make(Expr::Kind::kBinary, left->line);
    e->name = std::move(op);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return finish(std::move(e));
  }

  StatusOr<ExprPtr> parseOr() {
    INFER_ASSIGN_OR_RETURN(ExprPtr left, parseAnd());
    while (acceptName("or")) {
      INFER_ASSIGN_OR_RETURN(ExprPtr right, parseAnd());
      INFER_ASSIGN_OR_RETURN(left,
                             binary(std::move(left), "or", std::move(right)));
    }
    return left;
  }

  StatusOr<ExprPtr> parseAnd() {
    INFER_ASSIGN_OR_RETURN(ExprPtr left, parseNot());
    while (acceptName("and")) {
      INFER_ASSIGN_OR_RETURN(ExprPtr right, parseNot());
      INFER_ASSIGN_OR_RETURN(left,
                             binary(std::move(left), "and", std::move(right)));
    }
    return left;
  }

  StatusOr<ExprPtr> parseNot() {
    if (isName("not")) {
      Level level(nesting_);
      INFER_RETURN_IF_ERROR(checkNesting());
      const int line = next().line;
      INFER_ASSIGN_OR_RETURN(ExprPtr operand, parseNot());
      ExprPtr e = make(Expr::Kind::kUnary, line);
      e->name = "not";
      e->args.push_back(std::move(operand));
      return finish(std::move(e));
    }
    return parseCompare();
  }

  StatusOr<ExprPtr> parseCompare() {
    INFER_ASSIGN_OR_RETURN(ExprPtr left, parseMath1());
    while (true) {
      std::string op;
      if (isOp("==") || isOp("!=") || isOp("<") || isOp(">") || isOp("<=") ||
          isOp(">=")) {
        op = next().text;
      } else if (isName("in")) {
        next();
        op = "in";
      } else if (isName("not") && isName("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        return left;
      }
      INFER_ASSIGN_OR_RETURN(ExprPtr right, parseMath1());
      INFER_ASSIGN_OR_RETURN(left,
                             binary(std::move(left), op, std::move(right)));
    }
  }

  StatusOr<ExprPtr> parseMath1() {
    INFER_ASSIGN_OR_RETURN(ExprPtr left, parseConcat());
    while (isOp("+") || isOp("-")) {
      std::string op = next().text;
      INFER_ASSIGN_OR_RETURN(ExprPtr right, parseConcat());
      INFER_ASSIGN_OR_RETURN(left,
                             binary(std::move(left), op, std::move(right)));
    }
    return left;
  }

  StatusOr<ExprPtr> parseConcat() {
    INFER_ASSIGN_OR_RETURN(ExprPtr left, parseMath2());
    while (acceptOp("~")) {
      INFER_ASSIGN_OR_RETURN(ExprPtr right, parseMath2());
      INFER_ASSIGN_OR_RETURN(left,
                             binary(std::move(left), "~", std::move(right)));
    }
    return left;
  }

  StatusOr<ExprPtr> parseMath2() {
    INFER_ASSIGN_OR_RETURN(ExprPtr left, parsePow());
    while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
      std::string op = next().text;
      INFER_ASSIGN_OR_RETURN(ExprPtr right, parsePow());
      INFER_ASSIGN_OR_RETURN(left,
                             binary(std::move(left), op, std::move(right)));
    }
    return left;
  }

  StatusOr<ExprPtr> parsePow() {
    INFER_ASSIGN_OR_RETURN(ExprPtr left, parseUnary(true));
    while (acceptOp("**")) {
      INFER_ASSIGN_OR_RETURN(ExprPtr right, parseUnary(true));
      INFER_ASSIGN_OR_RETURN(left,
                             binary(std::move(left), "**", std::move(right)));
    }
    return left;
  }

  StatusOr<ExprPtr> parseUnary(bool withFilter) {
    ExprPtr node;
    if (isOp("-") || isOp("+")) {
      Level level(nesting_);
      INFER_RETURN_IF_ERROR(checkNesting());
      const Token &op = next();
      INFER_ASSIGN_OR_RETURN(ExprPtr operand, parseUnary(false));
      node = make(Expr::Kind::kUnary, op.line);
      node->name = op.text;
      node->args.push_back(std::move(operand));
      INFER_ASSIGN_OR_RETURN(node, finish(std::move(node)));
    } else {
      INFER_ASSIGN_OR_RETURN(node, parsePrimary());
    }
    INFER_ASSIGN_OR_RETURN(node, parsePostfix(std::move(node)));
    if (withFilter) {
      INFER_ASSIGN_OR_RETURN(node, parseFilters(std::move(node)));
    }
    return node;
  }

  Status parseArguments(Expr &call) {
    while (!acceptOp(")")) {
      if (peek().kind == TokenKind::kName && isOp("=", 1)) {
        std::string name = next().text;
        next();
        INFER_ASSIGN_OR_RETURN(ExprPtr value, parseExpression());
        call.kwargs.emplace_back(std::move(name), std::move(value));
      } else {
        INFER_ASSIGN_OR_RETURN(ExprPtr value, parseExpression());
        call.args.push_back(std::move(value));
      }
      if (!isOp(")"))
        INFER_RETURN_IF_ERROR(expectOp(","));
    }
    return Status::ok();
  }

  StatusOr<ExprPtr> parsePostfix(ExprPtr node) {
    while (true) {
      if (acceptOp(".")) {
        ExprPtr e = make(Expr::Kind::kAttribute, node->line);
        if (peek().kind == TokenKind::kInteger) {
          e->kind = Expr::Kind::kIndex;
          e->args.push_back(std::move(node));
          ExprPtr index = make(Expr::Kind::kLiteral, e->line);
          index->value = Value::integer(next().integer);
          e->args.push_back(std::move(index));
        } else {
          INFER_ASSIGN_OR_RETURN(e->name, expectName());
          e->args.push_back(std::move(node));
        }
        INFER_ASSIGN_OR_RETURN(node, finish(std::move(e)));
      } else if (acceptOp("[")) {
        ExprPtr parts[3];
        bool slice = false;
        for (int part = 0; part < 3; ++part) {
          if (!isOp(":") && !isOp("]")) {
            INFER_ASSIGN_OR_RETURN(parts[part], parseExpression());
          }
          if (part < 2 && acceptOp(":"))
            slice = true;
          else
            break;
        }
        INFER_RETURN_IF_ERROR(expectOp("]"));
        ExprPtr e =
            make(slice ? Expr::Kind::kSlice : Expr::Kind::kIndex, node->line);
        e->args.push_back(std::move(node));
        if (!slice && !parts[0])
          return error("empty subscript");
        for (int part = 0; part < (slice ? 3 : 1); ++part)
          e->args.push_back(std::move(parts[part]));
        INFER_ASSIGN_OR_RETURN(node, finish(std::move(e)));
      } else if (acceptOp("(")) {
        ExprPtr e = make(Expr::Kind::kCall, node->line);
        e->args.push_back(std::move(node));
        INFER_RETURN_IF_ERROR(parseArguments(*e));
        INFER_ASSIGN_OR_RETURN(node, finish(std::move(e)));
      } else {
        return node;
      }
    }
  }

  StatusOr<ExprPtr> parseFilters(ExprPtr node) {
    while (true) {
      if (acceptOp("|")) {
        ExprPtr e = make(Expr::Kind::kFilter, node->line);
        INFER_ASSIGN_OR_RETURN(e->name, expectName());
        while (acceptOp(".")) {
          INFER_ASSIGN_OR_RETURN(std::string part, expectName());
          e->name += "." + part;
        }
        e->args.push_back(std::move(node));
        if (acceptOp("("))
          INFER_RETURN_IF_ERROR(parseArguments(*e));
        INFER_ASSIGN_OR_RETURN(node, finish(std::move(e)));
      } else if (isName("is")) {
        next();
        ExprPtr e = make(Expr::Kind::kTest, node->line);
        e->negate = acceptName("not");
        if (peek().kind == TokenKind::kName) {
          e->name = next().text;
        } else if (isOp("==") || isOp("!=") || isOp("<") || isOp(">") ||
                   isOp("<=") || isOp(">=")) {
          e->name = next().text;
        } else {
          return error("expected a test name after 'is'");
        }
        e->args.push_back(std::move(node));
        if (acceptOp("(")) {
          INFER_RETURN_IF_ERROR(parseArguments(*e));
        } else if (peek().kind == TokenKind::kString ||
                   peek().kind == TokenKind::kInteger ||
                   peek().kind == TokenKind::kFloat ||
                   (peek().kind == TokenKind::kName && !isName("and") &&
                    !isName("or") && !isName("else") && !isName("if") &&
                    !isName("in") && !isName("not") && !isName("is"))) {
          INFER_ASSIGN_OR_RETURN(ExprPtr arg, parsePrimary());
          e->args.push_back(std::move(arg));
        }
        INFER_ASSIGN_OR_RETURN(node, finish(std::move(e)));
      } else {
        return node;
      }
    }
  }

  StatusOr<ExprPtr> parsePrimary() {
    const Token &t = peek();
    switch (t.kind) {
    case TokenKind::kString: {
      // Adjacent literals concatenate, as in Python.
      std::string text;
      while (peek().kind == TokenKind::kString)
        text += next().text;
      ExprPtr e = make(Expr::Kind::kLiteral, t.line);
      e->value = Value::string(std::move(text));
      return e;
    }
    case TokenKind::kInteger: {
      ExprPtr e = make(Expr::Kind::kLiteral, t.line);
      e->value = Value::integer(next().integer);
      return e;
    }
    case TokenKind::kFloat: {
      ExprPtr e = make(Expr::Kind::kLiteral, t.line);
      e->value = Value::floating(next().floating);
      return e;
    }
    case TokenKind::kName: {
      next();
      ExprPtr e = make(Expr::Kind::kLiteral, t.line);
      if (t.text == "true" || t.text == "True")
        e->value = Value::boolean(true);
      else if (t.text == "false" || t.text == "False")
        e->value = Value::boolean(false);
      else if (t.text == "none" || t.text == "None")
        e->value = Value::none();
      else {
        e->kind = Expr::Kind::kName;
        e->name = t.text;
      }
      return e;
    }
    case TokenKind::kOperator:
      if (acceptOp("(")) {
        INFER_ASSIGN_OR_RETURN(ExprPtr inner, parseTuple());
        INFER_RETURN_IF_ERROR(expectOp(")"));
        return inner;
      }
      if (acceptOp("[")) {
        ExprPtr e = make(Expr::Kind::kList, t.line);
        while (!acceptOp("]")) {
          INFER_ASSIGN_OR_RETURN(ExprPtr item, parseExpression());
          e->args.push_back(std::move(item));
          if (!isOp("]"))
            INFER_RETURN_IF_ERROR(expectOp(","));
        }
        return finish(std::move(e));
      }
      if (acceptOp("{")) {
        ExprPtr e = make(Expr::Kind::kDict, t.line);
        while (!acceptOp("}")) {
          INFER_ASSIGN_OR_RETURN(ExprPtr key, parseExpression());
          INFER_RETURN_IF_ERROR(expectOp(":"));
          INFER_ASSIGN_OR_RETURN(ExprPtr value, parseExpression());
          e->args.push_back(std::move(key));
          e->args.push_back(std::move(value));
          if (!isOp("}"))
            INFER_RETURN_IF_ERROR(expectOp(","));
        }
        return finish(std::move(e));
      }
      break;
    default:
      break;
    }
    return error("unexpected '" + t.text + "' in an expression");
  }

  const std::vector<Token> &tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

} // namespace

StatusOr<Body> parse(const std::vector<Token> &tokens) {
  return Parser(tokens).run();
}

} // namespace infer::serving::jinja
