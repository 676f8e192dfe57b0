// `fastkernels check`: static checks of a candidate source with Clang LibTooling.
//
// Note [Checker parsing]
// ~~~~~~~~~~~~~~~~~~~~~~
// A candidate is a .cu file that must be a drop-in replacement for one generated task header
// (generated/L<n>/<task>.h): the same namespace fk::generated::<ident>, Config, classes,
// constructors, forward overloads and public members. We parse both files the same way and
// compare their ASTs. Clang 14 (Debian bookworm) cannot parse CUDA 13's own headers, so:
//   * both are parsed as `-x cuda --cuda-host-only -nocudainc -nocudalib -std=c++17`, with the
//     shim generator/checker/shim/fk_checker_cuda_shim.h force-included and shim copies of
//     <cuda_runtime.h>, <cuda_bf16.h>, <cuda_fp16.h>, ... served from an in-memory file system
//     (the headers are embedded in the binary at configure time, so the tool has no data files);
//   * the shim defines the CUDA keywords as the attributes clang knows (__global__ ->
//     __attribute__((global)), ...), threadIdx/blockIdx/..., dim3, the launch-configuration hook
//     `__cudaPushCallConfiguration` (so `k<<<g, b, smem, stream>>>(...)` parses into a
//     CUDAKernelCallExpr whose stream argument we can inspect), the runtime API fk uses,
//     __nv_bfloat16/__half as opaque 16-bit structs, and __device__ overloads of the math
//     functions and intrinsics fk's kernels call;
//   * the *real* fk headers are parsed (runtime/include, kernels/include, generated/), so
//     fk::Tensor, fk::current_stream(), fk::tasks::*_forward and fk::kernels::* resolve to their
//     declarations and calls into them are found by qualified name, not by text;
//   * vendor library headers (<cublas_v2.h>, <cublasLt.h>, <cudnn.h>, <cudnn_frontend.h>) are
//     deliberately empty in the shim: a candidate's `cublasGemmEx(...)` becomes a
//     "use of undeclared identifier" diagnostic, which the diagnostic consumer turns into a
//     SUSPECT(vendor-library) flag at that spot instead of a compile error.
// Only clang's host-side parse is done (no codegen): device function bodies are type-checked as
// host-only compilation does, which is enough for interfaces and call sites; the candidate is
// parsed a second time with the device pass's macros (Note [Host and device passes]). A
// CPU test parses every generated header through this path and requires zero errors, so a shim
// gap shows up there first. Errors in included files are summarised unless --verbose.
//
// Interface comparison (header = expected, candidate = actual), per class of the namespace:
// constructors, methods (by name; each overload matched by its canonical parameter types, then
// the leftover overloads paired by arity for a precise diff), fields and type aliases; for each:
// parameter names, types (canonical, printed as written), order, const/reference qualifiers,
// default arguments, explicit, method cv/ref qualifiers, return types, access. Config's members
// are compared by name, type and value. Extra private members/helpers in the candidate are fine.
//
// Static flags (SUSPECT, in the candidate file only): calls into fk::kernels:: (baseline),
// fk::kernels::reference:: (reference), fk::tasks::*_forward (baseline glue); cublas*/cudnn*/
// cudnn_frontend; cudaStreamCreate*; kernel launches and cuda*Async calls whose stream is not
// fk::current_stream() (followed through local variables and through parameters of the
// candidate's own launcher functions at every call site); cudaDeviceSynchronize,
// cudaStreamSynchronize, cudaEventSynchronize, cudaEventRecord, sleep/usleep/nanosleep,
// clock()/clock_gettime/gettimeofday, std::chrono, std::this_thread; variables with static
// storage holding fk::Tensor or pointers (caches of outputs), except __device__/__constant__;
// host threads and callbacks, dlsym, persisting-L2 limits and attributes; baseline functions
// whose address is taken; conditionals on compiler-identifying macros and local includes
// (Note [Identifying macros]).
#include "check.h"

#include <clang/AST/ASTContext.h>
#include <clang/AST/DeclCXX.h>
#include <clang/AST/ExprCXX.h>
#include <clang/AST/RecursiveASTVisitor.h>
#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Frontend/ASTUnit.h>
#include <clang/Lex/Lexer.h>
#include <clang/Tooling/Tooling.h>

#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "fk/gen/scaffold.h"
#include "shim_files.h"

namespace fk::check {

namespace fs = std::filesystem;
using namespace clang;

namespace {

enum Exit { kPassed = 0, kMismatch = 1, kUsage = 2, kCompileError = 3, kIo = 4, kSuspect = 5 };

constexpr const char* kShimDir = "/fk-checker-shim";

struct Diag {
  std::string file;
  unsigned line = 0, col = 0;
  std::string level;  // error | warning | note
  std::string text;
};

std::string where(const Diag& d) {
  if (d.file.empty()) return "";
  return d.file + ":" + std::to_string(d.line) + ":" + std::to_string(d.col) + ": ";
}

// Collects clang's diagnostics; undeclared vendor identifiers become SUSPECT flags.
class Collector : public DiagnosticConsumer {
 public:
  std::vector<Diag> main_errors, other_errors, vendor_flags;
  std::string main_file;

  void HandleDiagnostic(DiagnosticsEngine::Level level, const Diagnostic& info) override {
    DiagnosticConsumer::HandleDiagnostic(level, info);
    if (level < DiagnosticsEngine::Error) return;
    SmallString<256> msg;
    info.FormatDiagnostic(msg);
    Diag d;
    d.level = "error";
    d.text = std::string(msg.str());
    bool in_main = false;
    if (info.hasSourceManager() && info.getLocation().isValid()) {
      const SourceManager& sm = info.getSourceManager();
      PresumedLoc p = sm.getPresumedLoc(sm.getExpansionLoc(info.getLocation()));
      if (p.isValid()) {
        d.file = p.getFilename();
        d.line = p.getLine();
        d.col = p.getColumn();
      }
      in_main = sm.isInMainFile(sm.getExpansionLoc(info.getLocation()));
    }
    static const std::regex undeclared(R"((?:use of undeclared identifier|unknown type name|no type named|no member named) '([A-Za-z_][A-Za-z0-9_]*)')");
    std::smatch m;
    if (in_main && std::regex_search(d.text, m, undeclared)) {
      std::string id = m[1].str();
      if (id.rfind("cublas", 0) == 0 || id.rfind("cudnn", 0) == 0 || id.rfind("CUBLAS", 0) == 0 ||
          id.rfind("CUDNN", 0) == 0) {
        d.level = "warning";
        d.text = "[SUSPECT:vendor-library] uses `" + id +
                 "` (cuBLAS/cuBLASLt/cuDNN): a candidate must implement the operator itself";
        vendor_flags.push_back(d);
        return;
      }
    }
    (in_main ? main_errors : other_errors).push_back(d);
  }
};

struct Parsed {
  std::unique_ptr<ASTUnit> ast;
  Collector diags;
};

// Note [Host and device passes]
// nvcc preprocesses a .cu file twice: a host pass (__CUDACC__, __NVCC__, no __CUDA_ARCH__) and a
// device pass per architecture (__CUDA_ARCH__ = 900 and __CUDA_ARCH_FEAT_SM90_ALL for sm_90a, the
// architecture the build targets). Code under `#ifdef __CUDA_ARCH__` exists only in the device
// pass, so the checker parses the candidate in both: the host pass for the interface and the
// compile errors, both for the static flags (merged). What neither pass can reproduce is a branch
// on the compiler itself (clang parses, g++ and nvcc compile): those conditionals are flagged
// (Note [Identifying macros]).
enum class Pass { kHost, kDevice };

std::vector<std::string> parse_args(const fs::path& root, Pass pass = Pass::kHost) {
  std::vector<std::string> a = {"-x", "cuda", "--cuda-host-only", "-nocudainc", "-nocudalib", "-std=c++17", "-fsyntax-only",
          "-ferror-limit=0", "-Wno-unknown-cuda-version", "-Wno-pragma-once-outside-header",
          "-resource-dir=" FK_CLANG_RESOURCE_DIR, "-D__CUDACC__", "-D__NVCC__", "-D__CUDACC_RELAXED_CONSTEXPR__", "-include",
          std::string(kShimDir) + "/fk_checker_cuda_shim.h", "-I" + std::string(kShimDir),
          "-I" + (root / "runtime" / "include").string(), "-I" + (root / "kernels" / "include").string(),
          "-I" + (root / "generated").string(), "-isystem" + (root / ".deps" / "include").string()};
  if (pass == Pass::kDevice) {
    a.push_back("-D__CUDA_ARCH__=900");
    a.push_back("-D__CUDA_ARCH_FEAT_SM90_ALL=1");
    a.push_back("-D__CUDA_ARCH_LIST__=900");
  }
  return a;
}

std::unique_ptr<Parsed> parse(const fs::path& root, const fs::path& file, const std::string& code, bool verbose,
                              Pass pass = Pass::kHost) {
  auto p = std::make_unique<Parsed>();
  tooling::FileContentMappings shim;
  for (const auto& [name, text] : shim_files()) shim.emplace_back(std::string(kShimDir) + "/" + name, text);
  std::vector<std::string> args = parse_args(root, pass);
  if (verbose) {
    std::cerr << "fastkernels check: parsing " << file.string() << " with";
    for (const auto& a : args) std::cerr << " " << a;
    std::cerr << "\n";
  }
  p->ast = tooling::buildASTFromCodeWithArgs(code, args, file.string(), "fastkernels-check",
                                             std::make_shared<PCHContainerOperations>(),
                                             tooling::getClangStripDependencyFileAdjuster(), shim, &p->diags);
  return p;
}

// ---- interface extraction -------------------------------------------------------------------

std::string source_text(const ASTContext& ctx, SourceRange r) {
  if (r.isInvalid()) return "";
  const SourceManager& sm = ctx.getSourceManager();
  return std::string(Lexer::getSourceText(CharSourceRange::getTokenRange(r), sm, ctx.getLangOpts()));
}

std::string squash(std::string s) {
  s.erase(std::remove_if(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); }), s.end());
  return s;
}

PrintingPolicy policy(const ASTContext& ctx) {
  PrintingPolicy pp(ctx.getLangOpts());
  pp.SuppressTagKeyword = true;
  pp.Bool = true;
  return pp;
}

std::string type_str(const ASTContext& ctx, QualType t) { return t.getAsString(policy(ctx)); }
std::string canon(const ASTContext& ctx, QualType t) { return t.getCanonicalType().getAsString(policy(ctx)); }

Diag at(const ASTContext& ctx, SourceLocation loc, const std::string& level, const std::string& text) {
  Diag d;
  d.level = level;
  d.text = text;
  const SourceManager& sm = ctx.getSourceManager();
  PresumedLoc p = sm.getPresumedLoc(sm.getExpansionLoc(loc));
  if (p.isValid()) {
    d.file = p.getFilename();
    d.line = p.getLine();
    d.col = p.getColumn();
  }
  return d;
}

const char* access_name(AccessSpecifier a) {
  switch (a) {
    case AS_public: return "public";
    case AS_protected: return "protected";
    case AS_private: return "private";
    default: return "none";
  }
}

/// `explicit RMSNorm(int64_t hidden_size, double eps = 1e-6)` / `fk::Tensor forward(const fk::Tensor &x)`.
std::string signature(const ASTContext& ctx, const FunctionDecl* f) {
  std::ostringstream o;
  const auto* m = dyn_cast<CXXMethodDecl>(f);
  if (const auto* c = dyn_cast<CXXConstructorDecl>(f)) {
    if (c->isExplicit()) o << "explicit ";
  } else {
    if (m && m->isStatic()) o << "static ";
    if (m && m->isVirtual()) o << "virtual ";
    o << type_str(ctx, f->getReturnType()) << " ";
  }
  o << f->getNameAsString() << "(";
  for (unsigned i = 0; i < f->getNumParams(); ++i) {
    const ParmVarDecl* p = f->getParamDecl(i);
    if (i) o << ", ";
    o << type_str(ctx, p->getOriginalType());
    if (!p->getName().empty()) o << " " << p->getNameAsString();
    if (p->hasDefaultArg() && !p->hasUnparsedDefaultArg()) o << " = " << source_text(ctx, p->getDefaultArgRange());
  }
  o << ")";
  if (m && m->isConst()) o << " const";
  if (m && m->getRefQualifier() == RQ_LValue) o << " &";
  if (m && m->getRefQualifier() == RQ_RValue) o << " &&";
  return o.str();
}

std::string param_key(const ASTContext& ctx, const FunctionDecl* f) {
  std::string k;
  for (unsigned i = 0; i < f->getNumParams(); ++i) k += canon(ctx, f->getParamDecl(i)->getType()) + ";";
  if (const auto* m = dyn_cast<CXXMethodDecl>(f)) {
    if (m->isConst()) k += "|const";
    k += "|ref" + std::to_string(static_cast<int>(m->getRefQualifier()));
  }
  return k;
}

struct ClassIface {
  const CXXRecordDecl* decl = nullptr;
  std::map<std::string, std::vector<const FunctionDecl*>> methods;  // "<ctor>" for constructors
  std::map<std::string, const ValueDecl*> fields;                   // fields and static data members
  std::map<std::string, const TypedefNameDecl*> aliases;
};

struct Iface {
  std::string ns;  // the <ident> of fk::generated::<ident>
  SourceLocation ns_loc;
  std::vector<std::string> namespaces;  // every fk::generated::<ident> seen in the main file
  std::map<std::string, ClassIface> classes;
  std::vector<std::string> class_order;
};

ClassIface class_iface(const CXXRecordDecl* r) {
  ClassIface c;
  c.decl = r;
  for (const Decl* d : r->decls()) {
    if (d->isImplicit()) continue;
    const Decl* inner = d;
    if (const auto* ft = dyn_cast<FunctionTemplateDecl>(d)) inner = ft->getTemplatedDecl();
    if (const auto* ctor = dyn_cast<CXXConstructorDecl>(inner)) {
      c.methods["<ctor>"].push_back(ctor);
    } else if (isa<CXXDestructorDecl>(inner)) {
      continue;
    } else if (const auto* m = dyn_cast<CXXMethodDecl>(inner)) {
      c.methods[m->getNameAsString()].push_back(m);
    } else if (const auto* f = dyn_cast<FieldDecl>(inner)) {
      c.fields[f->getNameAsString()] = f;
    } else if (const auto* v = dyn_cast<VarDecl>(inner)) {
      c.fields[v->getNameAsString()] = v;
    } else if (const auto* t = dyn_cast<TypedefNameDecl>(inner)) {
      c.aliases[t->getNameAsString()] = t;
    }
  }
  return c;
}

void collect_ns(const ASTContext& ctx, const DeclContext* dc, std::vector<std::string> path, Iface& out) {
  const SourceManager& sm = ctx.getSourceManager();
  for (const Decl* d : dc->decls()) {
    if (const auto* ns = dyn_cast<NamespaceDecl>(d)) {
      auto p = path;
      p.push_back(ns->getNameAsString());
      if (p.size() <= 2) {
        collect_ns(ctx, ns, p, out);
      } else if (p.size() == 3 && p[0] == "fk" && p[1] == "generated" && sm.isInMainFile(sm.getExpansionLoc(ns->getLocation()))) {
        if (std::find(out.namespaces.begin(), out.namespaces.end(), p[2]) == out.namespaces.end()) out.namespaces.push_back(p[2]);
      }
    }
  }
}

Iface extract(ASTContext& ctx, const std::string& ident) {
  Iface out;
  out.ns = ident;
  const SourceManager& sm = ctx.getSourceManager();
  collect_ns(ctx, ctx.getTranslationUnitDecl(), {}, out);
  // Walk every fk::generated::<ident> namespace block in the main file.
  std::function<void(const DeclContext*, std::vector<std::string>)> walk = [&](const DeclContext* dc, std::vector<std::string> path) {
    for (const Decl* d : dc->decls()) {
      if (const auto* ns = dyn_cast<NamespaceDecl>(d)) {
        auto p = path;
        p.push_back(ns->getNameAsString());
        if (p.size() < 3 && (p[0] == "fk") && (p.size() < 2 || p[1] == "generated")) walk(ns, p);
        else if (p.size() == 3 && p[2] == ident && sm.isInMainFile(sm.getExpansionLoc(ns->getLocation()))) {
          if (out.ns_loc.isInvalid()) out.ns_loc = ns->getLocation();
          for (const Decl* m : ns->decls()) {
            const auto* r = dyn_cast<CXXRecordDecl>(m);
            if (!r || !r->isThisDeclarationADefinition() || r->isImplicit()) continue;
            std::string name = r->getNameAsString();
            if (!out.classes.count(name)) out.class_order.push_back(name);
            out.classes[name] = class_iface(r);
          }
        }
      }
    }
  };
  walk(ctx.getTranslationUnitDecl(), {});
  return out;
}

// ---- interface comparison -------------------------------------------------------------------

struct Compare {
  ASTContext& hctx;  // header
  ASTContext& cctx;  // candidate
  std::vector<Diag> out;

  void err(SourceLocation loc, const std::string& text) { out.push_back(at(cctx, loc, "error", "[INTERFACE_MISMATCH] " + text)); }
  void expected(const Decl* h, const std::string& text) { out.push_back(at(hctx, h->getLocation(), "note", text)); }

  std::string what(const std::string& cls, const std::string& name) {
    return name == "<ctor>" ? cls + " constructor" : cls + "::" + name;
  }

  void compare_pair(const std::string& cls, const std::string& name, const FunctionDecl* h, const FunctionDecl* c) {
    std::vector<std::string> probs;
    const std::string label = what(cls, name);
    if (h->getNumParams() != c->getNumParams())
      probs.push_back("takes " + std::to_string(c->getNumParams()) + " parameter(s), expected " + std::to_string(h->getNumParams()));
    for (unsigned i = 0; i < std::min(h->getNumParams(), c->getNumParams()); ++i) {
      const ParmVarDecl* hp = h->getParamDecl(i);
      const ParmVarDecl* cp = c->getParamDecl(i);
      std::string pos = "parameter " + std::to_string(i + 1) + " `" + hp->getNameAsString() + "`";
      if (canon(hctx, hp->getType()) != canon(cctx, cp->getType()))
        probs.push_back(pos + " has type `" + type_str(cctx, cp->getOriginalType()) + "`, expected `" +
                        type_str(hctx, hp->getOriginalType()) + "`");
      if (hp->getName() != cp->getName())
        probs.push_back(pos + " is named `" + cp->getNameAsString() + "`, expected `" + hp->getNameAsString() + "`");
      if (hp->hasDefaultArg() != cp->hasDefaultArg())
        probs.push_back(pos + (hp->hasDefaultArg() ? " lacks its default argument" : " has a default argument the interface lacks"));
      else if (hp->hasDefaultArg() && !hp->hasUnparsedDefaultArg() && !cp->hasUnparsedDefaultArg() &&
               squash(source_text(hctx, hp->getDefaultArgRange())) != squash(source_text(cctx, cp->getDefaultArgRange())))
        probs.push_back(pos + " defaults to `" + source_text(cctx, cp->getDefaultArgRange()) + "`, expected `" +
                        source_text(hctx, hp->getDefaultArgRange()) + "`");
    }
    if (!isa<CXXConstructorDecl>(h) && canon(hctx, h->getReturnType()) != canon(cctx, c->getReturnType()))
      probs.push_back("returns `" + type_str(cctx, c->getReturnType()) + "`, expected `" + type_str(hctx, h->getReturnType()) + "`");
    const auto* hm = dyn_cast<CXXMethodDecl>(h);
    const auto* cm = dyn_cast<CXXMethodDecl>(c);
    if (hm && cm) {
      if (hm->isConst() != cm->isConst()) probs.push_back(std::string("is ") + (cm->isConst() ? "" : "not ") + "a const member function, expected " + (hm->isConst() ? "const" : "non-const"));
      if (hm->getRefQualifier() != cm->getRefQualifier()) probs.push_back("has a different ref-qualifier (& / &&)");
      if (hm->isStatic() != cm->isStatic()) probs.push_back(std::string("is ") + (cm->isStatic() ? "" : "not ") + "static");
      if (hm->getAccess() != cm->getAccess())
        probs.push_back(std::string("is ") + access_name(cm->getAccess()) + ", expected " + access_name(hm->getAccess()));
    }
    const auto* hc = dyn_cast<CXXConstructorDecl>(h);
    const auto* cc = dyn_cast<CXXConstructorDecl>(c);
    if (hc && cc && hc->isExplicit() != cc->isExplicit())
      probs.push_back(std::string("is ") + (cc->isExplicit() ? "" : "not ") + "explicit, expected " + (hc->isExplicit() ? "explicit" : "implicit"));
    for (const auto& p : probs) err(c->getLocation(), label + ": " + p);
    if (!probs.empty()) expected(h, "expected signature: " + signature(hctx, h));
  }

  void compare_overloads(const std::string& cls, const std::string& name, const ClassIface& hc, const ClassIface& cc) {
    std::vector<const FunctionDecl*> hs = hc.methods.at(name);
    std::vector<const FunctionDecl*> cs;
    if (cc.methods.count(name)) cs = cc.methods.at(name);
    // 1. Exact parameter lists.
    for (auto hit = hs.begin(); hit != hs.end();) {
      auto cit = std::find_if(cs.begin(), cs.end(), [&](const FunctionDecl* c) { return param_key(cctx, c) == param_key(hctx, *hit); });
      if (cit == cs.end()) {
        ++hit;
        continue;
      }
      compare_pair(cls, name, *hit, *cit);
      cs.erase(cit);
      hit = hs.erase(hit);
    }
    // 2. Leftovers: pair by arity (then the nearest) for a precise diff.
    for (const FunctionDecl* h : hs) {
      const FunctionDecl* best = nullptr;
      for (const FunctionDecl* c : cs)
        if (c->getNumParams() == h->getNumParams() && !best) best = c;
      if (!best && name != "<ctor>" && hs.size() == 1 && cs.size() == 1) best = cs.front();
      if (best) {
        compare_pair(cls, name, h, best);
        cs.erase(std::find(cs.begin(), cs.end(), best));
      } else {
        err(cc.decl->getLocation(), "missing " + what(cls, name) + ": expected `" + signature(hctx, h) + "`");
        expected(h, "declared here in the generated interface");
      }
    }
    for (const FunctionDecl* c : cs)
      if (c->getAccess() == AS_public)
        err(c->getLocation(), "unexpected " + what(cls, name) + " overload `" + signature(cctx, c) + "` (not in the generated interface)");
  }

  void compare_class(const std::string& cls, const ClassIface& hc, const ClassIface& cc) {
    if (hc.decl->isStruct() != cc.decl->isStruct() && hc.decl->isClass() != cc.decl->isClass()) {
      // struct vs class only changes default access, which the member checks cover.
    }
    for (const auto& [name, hs] : hc.methods) {
      if (name != "<ctor>" && hs.front()->getAccess() != AS_public) continue;
      compare_overloads(cls, name, hc, cc);
    }
    for (const auto& [name, hf] : hc.fields) {
      if (hf->getAccess() != AS_public) continue;
      auto it = cc.fields.find(name);
      if (it == cc.fields.end()) {
        err(cc.decl->getLocation(), "missing public member `" + type_str(hctx, hf->getType()) + " " + name + "` of " + cls);
        expected(hf, "declared here in the generated interface");
        continue;
      }
      const ValueDecl* cf = it->second;
      if (canon(hctx, hf->getType()) != canon(cctx, cf->getType()))
        err(cf->getLocation(), cls + "::" + name + " has type `" + type_str(cctx, cf->getType()) + "`, expected `" + type_str(hctx, hf->getType()) + "`");
      if (cf->getAccess() != AS_public) err(cf->getLocation(), cls + "::" + name + " is " + access_name(cf->getAccess()) + ", expected public");
      // Config: compile-time constants must keep their values.
      const auto* hv = dyn_cast<VarDecl>(hf);
      const auto* cv = dyn_cast<VarDecl>(cf);
      if (hv && cv && hv->isConstexpr()) {
        auto value = [](const VarDecl* v) {
          const Expr* e = v->getInit();
          if (!e) return std::string("<none>");
          const APValue* a = v->evaluateValue();
          if (!a) return squash(source_text(v->getASTContext(), e->getSourceRange()));
          return a->getAsString(v->getASTContext(), v->getType());
        };
        std::string hvv = value(hv), cvv = value(cv);
        if (hvv != cvv) err(cv->getLocation(), cls + "::" + name + " = " + cvv + ", expected " + hvv + " (the task's constants)");
      }
    }
    for (const auto& [name, ha] : hc.aliases) {
      if (ha->getAccess() != AS_public) continue;
      auto it = cc.aliases.find(name);
      if (it == cc.aliases.end()) {
        err(cc.decl->getLocation(), "missing public type alias `" + cls + "::" + name + "` = `" + type_str(hctx, ha->getUnderlyingType()) + "`");
        continue;
      }
      if (canon(hctx, ha->getUnderlyingType()) != canon(cctx, it->second->getUnderlyingType()))
        err(it->second->getLocation(), cls + "::" + name + " is `" + type_str(cctx, it->second->getUnderlyingType()) + "`, expected `" +
                                           type_str(hctx, ha->getUnderlyingType()) + "`");
    }
  }

  void run(const Iface& h, const Iface& c) {
    for (const auto& name : h.class_order) {
      auto it = c.classes.find(name);
      if (it == c.classes.end()) {
        std::string have;
        for (const auto& n : c.class_order) have += (have.empty() ? "" : ", ") + n;
        err(c.ns_loc, "missing class `" + name + "` in namespace fk::generated::" + h.ns +
                          (have.empty() ? std::string(" (the candidate defines no class there)") : " (the candidate defines: " + have + ")"));
        expected(h.classes.at(name).decl, "declared here in the generated interface");
        continue;
      }
      compare_class(name, h.classes.at(name), it->second);
    }
  }
};

// ---- static flags ---------------------------------------------------------------------------

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

class Flagger : public RecursiveASTVisitor<Flagger> {
 public:
  explicit Flagger(ASTContext& ctx) : ctx_(ctx), sm_(ctx.getSourceManager()) {}
  std::vector<Diag> flags;

  bool in_main(SourceLocation l) const { return l.isValid() && sm_.isInMainFile(sm_.getExpansionLoc(l)); }

  void flag(SourceLocation loc, const std::string& category, const std::string& text) {
    Diag d = at(ctx_, loc, "warning", "[SUSPECT:" + category + "] " + text);
    std::string key = std::to_string(d.line) + ":" + category;
    if (seen_.insert(key).second) flags.push_back(d);
  }

  static const FunctionDecl* pattern(const FunctionDecl* f) {
    if (!f) return nullptr;
    if (const FunctionDecl* p = f->getTemplateInstantiationPattern()) f = p;
    return f->getCanonicalDecl();
  }

  // Pass 1: every call site of every function (to follow stream parameters).
  bool VisitCallExpr(CallExpr* call) {
    if (const FunctionDecl* f = call->getDirectCallee()) calls_[pattern(f)].push_back(call);
    if (auto* k = dyn_cast<CUDAKernelCallExpr>(call)) launches_.push_back(k);
    return true;
  }

  void check_callee(const std::string& q, SourceLocation loc) {
    if (starts_with(q, "fk::kernels::reference::"))
      flag(loc, "reference-call", "calls the reference implementation `" + q + "`; a candidate must implement the operator itself");
    else if (starts_with(q, "fk::kernels::"))
      flag(loc, "baseline-call", "calls the baseline kernel `" + q + "`; a candidate must implement the operator itself");
    else if (starts_with(q, "fk::tasks::") && q.size() > 8 && q.compare(q.size() - 8, 8, "_forward") == 0)
      flag(loc, "baseline-call", "calls the baseline glue `" + q + "` (TODO: replace with your kernel)");
    else if (starts_with(q, "cublas") || starts_with(q, "cudnn") || starts_with(q, "cudnn_frontend::"))
      flag(loc, "vendor-library", "calls `" + q + "` (cuBLAS/cuBLASLt/cuDNN); a candidate must implement the operator itself");
    else if (starts_with(q, "cudaStreamCreate"))
      flag(loc, "stream-create", "creates a stream (`" + q + "`); run on fk::current_stream()");
    else if (q == "cudaDeviceSetLimit" || q == "cudaStreamSetAttribute" || q == "cudaCtxResetPersistingL2Cache" ||
             q == "cudaGraphKernelNodeSetAttribute" || q == "cudaLaunchKernelEx")
      flag(loc, "persisting-l2", "`" + q + "`: device limits and stream/launch attributes (persisting-L2 windows among them) "
                                 "are the runner's to set, not a task's (Note [Persisting L2] in runtime/src/timing.cu)");
    else if (q == "cudaDeviceSynchronize" || q == "cudaStreamSynchronize" || q == "cudaEventSynchronize" ||
             q == "cudaEventRecord" || q == "cudaEventElapsedTime" || q == "cudaStreamWaitEvent")
      flag(loc, "host-sync-timing", "`" + q + "`: host-side synchronisation/timing inside a candidate distorts the measurement");
    else if (q == "std::thread" || q == "std::jthread" || q == "std::async" || q == "pthread_create" ||
             q == "cudaLaunchHostFunc" || q == "cudaStreamAddCallback" || starts_with(q, "std::packaged_task"))
      flag(loc, "host-thread", "`" + q + "`: work on host threads (or host callbacks) is not on the task's stream and is not timed");
    else if (q == "dlsym" || q == "dlopen" || q == "dlvsym")
      flag(loc, "dynamic-symbol", "`" + q + "`: symbols looked up at run time are invisible to this check");
    else if (q == "sleep" || q == "usleep" || q == "nanosleep" || q == "clock" || q == "clock_gettime" ||
             q == "gettimeofday" || q == "time" || starts_with(q, "std::chrono::") || starts_with(q, "std::this_thread::"))
      flag(loc, "host-sync-timing", "`" + q + "`: host-side timing or sleeping inside a candidate");
  }

  void check_stream(const Expr* e, SourceLocation loc, const std::string& what) {
    if (!e || isa<CXXDefaultArgExpr>(e->IgnoreParenImpCasts())) {
      flag(loc, "foreign-stream", what + " on the default stream; pass fk::current_stream()");
      return;
    }
    if (!is_current_stream(e, 0))
      flag(loc, "foreign-stream", what + " on a stream that is not fk::current_stream()");
  }

  bool is_current_stream(const Expr* e, int depth) {
    if (!e || depth > 6) return false;
    e = e->IgnoreParenImpCasts();
    if (const auto* c = dyn_cast<CallExpr>(e)) {
      const FunctionDecl* f = c->getDirectCallee();
      return f && f->getQualifiedNameAsString() == "fk::current_stream";
    }
    if (const auto* d = dyn_cast<DeclRefExpr>(e)) {
      if (const auto* p = dyn_cast<ParmVarDecl>(d->getDecl())) {
        const auto* f = dyn_cast_or_null<FunctionDecl>(p->getDeclContext());
        if (!f) return false;
        auto it = calls_.find(pattern(f));
        if (it == calls_.end() || it->second.empty()) return true;  // never called: nothing launches through it
        for (const CallExpr* call : it->second) {
          unsigned i = p->getFunctionScopeIndex();
          if (isa<CXXOperatorCallExpr>(call) && isa<CXXMethodDecl>(f)) ++i;
          if (i >= call->getNumArgs() || !is_current_stream(call->getArg(i), depth + 1)) return false;
        }
        return true;
      }
      if (const auto* v = dyn_cast<VarDecl>(d->getDecl()))
        return !v->hasGlobalStorage() && v->getInit() && is_current_stream(v->getInit(), depth + 1);
    }
    return false;
  }

  void run(TranslationUnitDecl* tu) {
    TraverseDecl(tu);  // pass 1: call sites
    for (auto& [f, sites] : calls_)
      for (CallExpr* call : sites) {
        if (!in_main(call->getBeginLoc())) continue;
        const FunctionDecl* callee = call->getDirectCallee();
        std::string q = callee->getQualifiedNameAsString();
        check_callee(q, call->getBeginLoc());
        if (isa<CUDAKernelCallExpr>(call)) {
          // checked below with every launch (including dependent ones in templates)
        } else if (starts_with(q, "cuda") && q.size() > 5 && q.compare(q.size() - 5, 5, "Async") == 0) {
          const Expr* stream = nullptr;
          bool has = false;
          for (unsigned i = 0; i < callee->getNumParams() && i < call->getNumArgs(); ++i)
            if (type_str(ctx_, callee->getParamDecl(i)->getType()) == "cudaStream_t") stream = call->getArg(i), has = true;
          if (has) check_stream(stream, call->getBeginLoc(), "`" + q + "`");
        }
      }
    for (const CUDAKernelCallExpr* k : launches_) {
      if (!in_main(k->getBeginLoc())) continue;
      const CallExpr* cfg = k->getConfig();
      std::string name = source_text(ctx_, k->getCallee()->getSourceRange());
      check_stream(cfg && cfg->getNumArgs() >= 4 ? cfg->getArg(3) : nullptr, k->getBeginLoc(), "kernel launch `" + name + "<<<...>>>`");
    }
    // Unresolved calls inside templates (dependent arguments): judge by the name looked up.
    for (const UnresolvedLookupExpr* u : unresolved_)
      for (const NamedDecl* d : u->decls()) {
        check_callee(d->getQualifiedNameAsString(), u->getBeginLoc());
        break;
      }
    for (const DeclRefExpr* r : refs_) {
      std::string q = r->getDecl()->getQualifiedNameAsString();
      // Every mention, not only direct calls: a baseline function whose address is taken (and
      // called through a pointer) is still the baseline.
      if (isa<FunctionDecl>(r->getDecl()) || starts_with(q, "std::chrono::") || starts_with(q, "std::this_thread::"))
        check_callee(q, r->getBeginLoc());
    }
    std::stable_sort(flags.begin(), flags.end(), [](const Diag& a, const Diag& b) { return a.line != b.line ? a.line < b.line : a.col < b.col; });
  }

  bool VisitUnresolvedLookupExpr(UnresolvedLookupExpr* u) {
    if (in_main(u->getBeginLoc())) unresolved_.push_back(u);
    return true;
  }
  bool VisitDeclRefExpr(DeclRefExpr* r) {
    if (in_main(r->getBeginLoc())) refs_.push_back(r);
    return true;
  }
  bool VisitCXXConstructExpr(CXXConstructExpr* c) {
    if (in_main(c->getBeginLoc()) && c->getConstructor()) {
      std::string q = c->getConstructor()->getParent()->getQualifiedNameAsString();
      if (starts_with(q, "std::chrono::") || q == "std::thread" || q == "std::jthread" || starts_with(q, "std::packaged_task"))
        check_callee(q, c->getBeginLoc());
    }
    return true;
  }
  bool VisitVarDecl(VarDecl* v) {
    if (!in_main(v->getLocation()) || !v->hasGlobalStorage() || v->isConstexpr() || isa<ParmVarDecl>(v)) return true;
    if (v->hasAttr<CUDADeviceAttr>() || v->hasAttr<CUDAConstantAttr>() || v->hasAttr<CUDASharedAttr>()) return true;
    QualType t = v->getType();
    std::string ct = canon(ctx_, t);
    bool tensor = ct.find("fk::Tensor") != std::string::npos;
    bool pointer = t->isPointerType() && !t->getPointeeType().isConstQualified();
    bool stream = ct.find("CUstream_st") != std::string::npos || ct.find("CUevent_st") != std::string::npos;
    if (tensor || pointer || stream)
      flag(v->getLocation(), "static-cache",
           std::string(v->isStaticLocal() ? "static local" : "variable with static storage") + " `" + v->getNameAsString() + "` of type `" +
               type_str(ctx_, t) + "`: state kept across calls (a cache of outputs or buffers) is not allowed; allocate per call");
    return true;
  }

  bool shouldVisitTemplateInstantiations() const { return false; }

 private:
  ASTContext& ctx_;
  const SourceManager& sm_;
  std::set<std::string> seen_;
  std::map<const FunctionDecl*, std::vector<CallExpr*>> calls_;
  std::vector<const UnresolvedLookupExpr*> unresolved_;
  std::vector<const CUDAKernelCallExpr*> launches_;
  std::vector<const DeclRefExpr*> refs_;
};

// Note [Identifying macros]
// The checker is clang with a shim; the build is nvcc with g++. A candidate that branches on a
// macro that tells them apart (`#ifdef __clang__`, `#ifndef __GNUC__`, the shim's own
// FK_CHECKER_PARSE, nvcc's version macros, __has_feature) can show the checker one program and
// compile another, so every such conditional in the candidate is flagged (SUSPECT
// preprocessor-branch), whichever way it goes. Branches on __CUDA_ARCH__ are the normal way to
// write device code and are not flagged: both passes are parsed (Note [Host and device passes]).
// A quoted #include of anything but fk's public headers (fk/...) or a generated task (L<n>/...)
// brings in code this check never reads (SUSPECT local-include).
bool identifying_macro(const std::string& id) {
  static const char* const prefixes[] = {"__clang", "__llvm", "__GNUC", "__GNUG", "__NVCC", "__CUDACC", "__NVCOMPILER",
                                         "__PGI", "_MSC_", "__INTEL", "__EDG", "FK_CHECKER", "__has_feature",
                                         "__has_extension", "__is_identifier", "__CUDA_API_VER", "CUDART_VERSION"};
  for (const char* p : prefixes)
    if (id.rfind(p, 0) == 0) return true;
  return false;
}

std::vector<Diag> scan_directives(ASTUnit& ast) {
  std::vector<Diag> out;
  const SourceManager& sm = ast.getSourceManager();
  const FileID fid = sm.getMainFileID();
  const llvm::StringRef buf = sm.getBufferData(fid);
  Lexer lex(sm.getLocForStartOfFile(fid), ast.getLangOpts(), buf.begin(), buf.begin(), buf.end());
  lex.SetCommentRetentionState(false);
  auto diag_at = [&](SourceLocation l, const std::string& category, const std::string& text) {
    Diag d;
    PresumedLoc p = sm.getPresumedLoc(l);
    if (p.isValid()) d.file = p.getFilename(), d.line = p.getLine(), d.col = p.getColumn();
    d.level = "warning";
    d.text = "[SUSPECT:" + category + "] " + text;
    out.push_back(d);
  };
  Token t;
  std::vector<Token> line;
  auto handle = [&]() {
    if (line.size() < 2 || !line[0].is(tok::hash)) return;
    const Token& kw = line[1];
    if (!kw.is(tok::raw_identifier) && !kw.isAnyIdentifier()) return;
    const std::string k = kw.getRawIdentifier().str();
    if (k == "if" || k == "ifdef" || k == "ifndef" || k == "elif" || k == "elifdef" || k == "elifndef") {
      std::set<std::string> named;
      for (size_t i = 2; i < line.size(); ++i) {
        if (!line[i].is(tok::raw_identifier)) continue;
        const std::string id = line[i].getRawIdentifier().str();
        if (identifying_macro(id) && named.insert(id).second)
          diag_at(line[0].getLocation(), "preprocessor-branch",
                  "`#" + k + "` on `" + id + "`, which tells the compilers apart: the checker (clang) and the build (nvcc, g++) "
                  "would see different code (Note [Identifying macros])");
      }
    } else if (k == "include" && line.size() >= 3 && line[2].is(tok::string_literal)) {
      std::string inc(line[2].getLiteralData() ? std::string(line[2].getLiteralData(), line[2].getLength()) : "");
      if (inc.size() >= 2) inc = inc.substr(1, inc.size() - 2);
      const bool ours = inc.rfind("fk/", 0) == 0 ||
                        (inc.size() > 3 && inc[0] == 'L' && inc[1] >= '1' && inc[1] <= '4' && inc[2] == '/');
      if (!ours)
        diag_at(line[0].getLocation(), "local-include",
                "`#include \"" + inc + "\"`: code outside the candidate file (and fk's public headers) is not checked; "
                "put it in the candidate");
    }
  };
  while (true) {
    lex.LexFromRawLexer(t);
    if (t.is(tok::eof)) break;
    if (t.isAtStartOfLine() && !line.empty()) {
      handle();
      line.clear();
    }
    line.push_back(t);
  }
  handle();
  return out;
}

void print(const std::vector<Diag>& ds) {
  for (const auto& d : ds) std::cerr << where(d) << d.level << ": " << d.text << "\n";
}

std::string rel_or_abs(const fs::path& root, const fs::path& p) {
  std::error_code ec;
  fs::path rel = fs::weakly_canonical(p, ec).lexically_relative(fs::weakly_canonical(root, ec));
  if (!rel.empty() && rel.native().rfind("..", 0) != 0) return rel.generic_string();
  return p.string();
}

}  // namespace

int run(const Options& o) {
  std::ifstream in(o.candidate, std::ios::binary);
  if (!in) {
    std::cerr << o.candidate << ": cannot read\n";
    return kIo;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string code = ss.str();
  std::string merr;
  auto tasks = fk::gen::read_manifest(o.root, &merr);
  if (!tasks) {
    std::cerr << "fastkernels check: " << merr << "\n";
    return kIo;
  }
  const fs::path cand_path = fs::absolute(o.candidate);
  const std::string shown = rel_or_abs(fs::current_path(), cand_path);

  // Task: --task, else the candidate's namespace (found by the same parse below; a cheap regex
  // first so the header can be parsed in parallel in a later version).
  std::string task = o.task;
  if (task.empty()) {
    static const std::regex ns_re(R"(namespace\s+fk\s*::\s*generated\s*::\s*([A-Za-z_][A-Za-z0-9_]*))");
    std::set<std::string> found;
    for (auto it = std::sregex_iterator(code.begin(), code.end(), ns_re); it != std::sregex_iterator(); ++it) found.insert((*it)[1].str());
    if (found.size() != 1) {
      std::cerr << shown << ": error: " << (found.empty() ? "no `namespace fk::generated::<task_ident>` found" : "several fk::generated namespaces")
                << "; cannot infer the task (pass --task <name>)\n";
      return kUsage;
    }
    task = *found.begin();
  }
  const fk::gen::ManifestTask* t = fk::gen::find_task(*tasks, task);
  if (!t) {
    std::cerr << shown << ": error: unknown task `" << task << "` (not in generated/manifest.json); close names:\n";
    for (const auto& n : fk::gen::close_task_names(*tasks, task)) std::cerr << "  " << n << "\n";
    return kUsage;
  }

  // The generated header, parsed the same way (it is the expected interface).
  const fs::path hpath = o.root / t->header;
  std::ifstream hin(hpath, std::ios::binary);
  if (!hin) {
    std::cerr << t->header << ": cannot read (task " << t->name << ")\n";
    return kIo;
  }
  std::stringstream hs;
  hs << hin.rdbuf();
  auto hp = parse(o.root, hpath, hs.str(), o.verbose);
  if (!hp->ast || !hp->diags.main_errors.empty() || !hp->diags.other_errors.empty()) {
    std::cerr << "fastkernels check: internal error: the generated header " << t->header
              << " does not parse with the checker's CUDA shim (generator/checker/shim/); first errors:\n";
    auto all = hp->diags.main_errors;
    all.insert(all.end(), hp->diags.other_errors.begin(), hp->diags.other_errors.end());
    if (all.size() > 10) all.resize(10);
    print(all);
    return kUsage;
  }
  Iface hi = extract(hp->ast->getASTContext(), t->ident);

  auto cp = parse(o.root, cand_path, code, o.verbose);
  if (!cp->ast) {
    std::cerr << shown << ": error: [COMPILE_ERROR] clang could not build an AST\n";
    return kCompileError;
  }
  ASTContext& cctx = cp->ast->getASTContext();
  Iface ci = extract(cctx, t->ident);
  int nerr = 0, nwarn = 0;
  if (ci.ns_loc.isInvalid()) {
    std::cerr << shown << ":1:1: error: [INTERFACE_MISMATCH] no `namespace fk::generated::" << t->ident << "` in the candidate (task "
              << t->name << ")\n";
    ++nerr;
  }
  Compare cmp{hp->ast->getASTContext(), cctx, {}};
  if (ci.ns_loc.isValid()) cmp.run(hi, ci);
  for (const auto& d : cmp.out) nerr += d.level == "error";
  print(cmp.out);

  // Compile errors (the candidate's own; included files only summarised: they are usually a
  // consequence, or a gap in the shim).
  std::vector<Diag> compile = cp->diags.main_errors;
  for (auto& d : compile) d.text = "[COMPILE_ERROR] " + d.text;
  print(compile);
  if (!cp->diags.other_errors.empty()) {
    if (o.verbose) print(cp->diags.other_errors);
    else
      std::cerr << shown << ": note: " << cp->diags.other_errors.size()
                << " error(s) in included files (rerun with --verbose; if the candidate builds with nvcc, the checker's CUDA shim lacks a declaration)\n";
  }
  const bool compile_error = !compile.empty() || !cp->diags.other_errors.empty();

  Flagger flagger(cctx);
  flagger.run(cctx.getTranslationUnitDecl());
  std::vector<Diag> flags = cp->diags.vendor_flags;
  flags.insert(flags.end(), flagger.flags.begin(), flagger.flags.end());
  const std::vector<Diag> directives = scan_directives(*cp->ast);
  flags.insert(flags.end(), directives.begin(), directives.end());
  // The device pass (Note [Host and device passes]): its flags are merged; its errors are
  // reported as notes only (the host pass is the compile check).
  auto dp = parse(o.root, cand_path, code, o.verbose, Pass::kDevice);
  if (dp->ast) {
    Flagger device_flagger(dp->ast->getASTContext());
    device_flagger.run(dp->ast->getASTContext().getTranslationUnitDecl());
    std::set<std::string> have;
    for (const Diag& d : flags) have.insert(std::to_string(d.line) + ":" + d.text);
    auto merge = [&](const std::vector<Diag>& more) {
      for (const Diag& d : more)
        if (have.insert(std::to_string(d.line) + ":" + d.text).second) flags.push_back(d);
    };
    merge(dp->diags.vendor_flags);
    merge(device_flagger.flags);
    if (!dp->diags.main_errors.empty())
      std::cerr << shown << ": note: the device pass (__CUDA_ARCH__ 900) has " << dp->diags.main_errors.size()
                << " error(s) in the candidate, e.g. " << where(dp->diags.main_errors.front()) << dp->diags.main_errors.front().text << "\n";
  }
  std::stable_sort(flags.begin(), flags.end(), [](const Diag& a, const Diag& b) { return a.line != b.line ? a.line < b.line : a.col < b.col; });
  print(flags);
  nwarn = static_cast<int>(flags.size());

  const char* verdict = nerr ? "INTERFACE_MISMATCH" : compile_error ? "COMPILE_ERROR" : nwarn ? "SUSPECT" : "PASSED";
  std::cout << shown << ": " << verdict << " (task " << t->name << "; " << nerr << " interface error(s), " << compile.size()
            << " compile error(s), " << nwarn << " suspect flag(s))\n";
  if (nerr) return kMismatch;
  if (compile_error) return kCompileError;
  if (nwarn) return kSuspect;
  return kPassed;
}

}  // namespace fk::check
