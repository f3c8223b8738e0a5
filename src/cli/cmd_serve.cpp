// infokv serve: a local server in the OpenAI wire format (POST /v1/chat/completions and /v1/completions, streamed
// with server-sent events or not; GET /v1/models, /health, /metrics in Prometheus text) on the engine
// (src/engine): requests from any number of clients decode in continuous batches over one KV pool, and when the pool
// runs short conversations are moved, recomputed or compressed instead of failing. HTTP is cpp-httplib (Debian's
// libcpp-httplib-dev: one header, a thread per connection from a bounded pool, timeouts and body limits built in).
// One engine thread owns the engine; HTTP threads hand it jobs and read tokens back through per-job queues.
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.hpp"
#include "cli/json.hpp"
#include "compress/policy_table.hpp"
#include "engine/engine.hpp"
#include "session/chat.hpp"
#include "util/error.hpp"
#include "util/json_reader.hpp"

namespace infokv {
namespace cli {

namespace {

using Clock = std::chrono::steady_clock;

// An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
struct HttpError {
  int status;
  std::string message, type, param, code;
};

std::string error_body(const HttpError &e) {
  JsonObject inner;
  inner.str("message", e.message).str("type", e.type);
  inner.raw("param", e.param.empty() ? "null" : json_str(e.param));
  inner.raw("code", e.code.empty() ? "null" : json_str(e.code));
  JsonObject o;
  o.raw("error", inner.dump());
  return o.dump();
}

[[noreturn]] void bad_request(const std::string &msg, const std::string &param = "", const std::string &code = "") {
  throw HttpError{400, msg, "invalid_request_error", param, code};
}

// One request in flight: what the engine thread needs, and the tokens it hands back.
struct Job {
  std::vector<int32_t> prompt;
  int64_t system_end = 0;  // chat: where the system turn ends (a prefix cache save point), 0: none
  int32_t max_tokens = 16;
  SamplerParams sampling;
  int32_t priority = 0;
  int64_t memory_limit = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<int32_t> tokens;
  bool done = false;
  bool length_cut = false;  // stopped at max_tokens (finish_reason "length")
  std::string error;
  std::atomic<bool> cancel{false};
  Clock::time_point submitted = Clock::now();
  double ttft = -1;

  void push(int32_t t) {
    std::lock_guard<std::mutex> lk(mu);
    if (ttft < 0) ttft = std::chrono::duration<double>(Clock::now() - submitted).count();
    tokens.push_back(t);
    cv.notify_all();
  }
  void finish(const std::string &err, bool length) {
    std::lock_guard<std::mutex> lk(mu);
    done = true;
    error = err;
    length_cut = length;
    cv.notify_all();
  }
  // Waits for tokens or the end, until `deadline`; moves what arrived into `out`. False when the deadline passed.
  bool take(std::vector<int32_t> &out, Clock::time_point deadline) {
    std::unique_lock<std::mutex> lk(mu);
    if (!cv.wait_until(lk, deadline, [&] { return done || !tokens.empty(); })) return false;
    out.assign(tokens.begin(), tokens.end());
    tokens.clear();
    return true;
  }
};

struct Metrics {
  std::atomic<int64_t> requests{0}, completed{0}, failed{0}, rejected{0}, cancelled{0}, generated_tokens{0},
      prompt_tokens{0};
};

// The engine thread: takes jobs, steps the engine while anything is pending, hands tokens back, closes what ended.
class Scheduler {
 public:
  Scheduler(std::shared_ptr<const Model> model, const EngineOptions &opts) : engine_(std::move(model), opts) {
    const KvStats kv = engine_.session().kv().stats();
    snap_.blocks_free = kv.blocks_free;
    snap_.blocks_total = kv.blocks_total;
    thread_ = std::thread([this] { loop(); });
  }
  ~Scheduler() { shutdown(); }
  void submit(const std::shared_ptr<Job> &j) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!stop_) {
        inbox_.push_back(j);
        cv_.notify_all();
        return;
      }
    }
    j->finish("server shutting down", false);
  }
  // Ends every job (they finish with "server shutting down") and the engine thread; later submits finish at once.
  void shutdown() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void wake() { cv_.notify_all(); }
  // A snapshot of the engine's counters and the pool (read under the engine thread's lock).
  struct Snapshot {
    EngineStats stats;
    int64_t pending = 0, conversations = 0, bytes_used = 0, bytes_uncompressed = 0, blocks_free = 0, blocks_total = 0;
  };
  Snapshot snapshot() {
    std::lock_guard<std::mutex> lk(state_mu_);
    return snap_;
  }
  const Model &model() const { return engine_.session().model(); }

 private:
  void loop() {
    for (;;) {
      std::vector<std::shared_ptr<Job>> fresh;
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (!engine_.busy() && inbox_.empty() && !stop_)
          cv_.wait_for(lk, std::chrono::milliseconds(50), [this] { return stop_ || !inbox_.empty(); });
        if (stop_) break;
        fresh.assign(inbox_.begin(), inbox_.end());
        inbox_.clear();
      }
      for (auto &j : fresh) {
        try {
          const int64_t c = engine_.open(j->priority, j->memory_limit, j->sampling);
          try {
            Turn turn{j->prompt, j->max_tokens, {}, {}};
            if (j->system_end > 0) turn.save_points.push_back(j->system_end);
            engine_.submit(c, std::move(turn));
          } catch (...) {
            engine_.close(c);
            throw;
          }
          active_[c] = j;
        } catch (const Error &e) {
          j->finish(e.what(), false);
        }
      }
      for (auto it = active_.begin(); it != active_.end();) {
        if (it->second->cancel.load()) {
          engine_.close(it->first);
          it->second->finish("cancelled", false);
          it = active_.erase(it);
        } else {
          ++it;
        }
      }
      if (engine_.busy()) {
        try {
          for (const TokenEvent &ev : engine_.step()) {
            auto it = active_.find(ev.conversation);
            if (it != active_.end()) it->second->push(ev.token);
          }
        } catch (const std::exception &e) {
          // A bug, not a client's fault: every request in flight gets the message; the server goes on.
          for (auto &kv : active_) {
            engine_.close(kv.first);
            kv.second->finish(std::string("internal error: ") + e.what(), false);
          }
          active_.clear();
        }
      }
      for (auto it = active_.begin(); it != active_.end();) {
        const TurnState st = engine_.state(it->first);
        if (st == TurnState::done || st == TurnState::failed) {
          const bool length = st == TurnState::done &&
                              static_cast<int32_t>(engine_.generated(it->first).size()) >= it->second->max_tokens;
          const std::string err = st == TurnState::failed ? engine_.failure(it->first) : "";
          engine_.close(it->first);  // its prompt goes to the prefix cache
          it->second->finish(err, length);
          it = active_.erase(it);
        } else {
          ++it;
        }
      }
      Snapshot s;
      s.stats = engine_.stats();
      s.pending = engine_.pending();
      s.conversations = engine_.conversations();
      const KvStats kv = engine_.session().kv().stats();
      s.bytes_used = kv.bytes_used;
      s.blocks_free = kv.blocks_free;
      s.blocks_total = kv.blocks_total;
      for (auto &kvp : active_) {
        const int32_t seq = engine_.sequence(kvp.first);
        if (seq >= 0) s.bytes_uncompressed += engine_.session().info(seq).uncompressed_bytes;
      }
      std::lock_guard<std::mutex> lk(state_mu_);
      snap_ = s;
    }
    for (auto &kv : active_) kv.second->finish("server shutting down", false);
    std::lock_guard<std::mutex> lk(mu_);
    for (auto &j : inbox_) j->finish("server shutting down", false);
    inbox_.clear();
  }

  Engine engine_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> inbox_;
  bool stop_ = false;
  std::map<int64_t, std::shared_ptr<Job>> active_;  // engine thread only
  std::mutex state_mu_;
  Snapshot snap_;
};

struct ServeSpec {
  std::string host = "127.0.0.1", api_key, model_name;
  int port = 8080;
  int64_t max_concurrent = 64, max_body = 1 << 20, max_prompt = 0, max_tokens_limit = 4096;
  double timeout_s = 600;
  int threads_http = 0;
  int32_t max_priority = 0;  // the highest infokv.priority a client may ask for
  bool can_compress = true;  // the engine has a compression policy (infokv.budget needs one)
  int64_t pool_blocks = 0, block_size = 16, n_layer = 1;  // to refuse what could never fit
};

bool constant_time_equal(const std::string &a, const std::string &b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::string &x = a.size() == b.size() ? b : a;  // compare a with itself when sizes differ: same time
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ x[i]);
  return diff == 0;
}

const JsonValue *member(const JsonValue &o, const char *k) { return o.find(k); }

double number_in(const JsonValue &o, const char *k, double def, double lo, double hi) {
  const JsonValue *v = member(o, k);
  if (v == nullptr || v->is_null()) return def;
  if (!v->is_number() || !(v->as_number() >= lo && v->as_number() <= hi))
    bad_request(std::string(k) + " must be a number in [" + json_num(lo) + ", " + json_num(hi) + "]", k);
  return v->as_number();
}

int64_t int_in(const JsonValue &o, const char *k, int64_t def, int64_t lo, int64_t hi) {
  const JsonValue *v = member(o, k);
  if (v == nullptr || v->is_null()) return def;
  if (!v->is_integer() || v->as_int() < lo || v->as_int() > hi)
    bad_request(std::string(k) + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", k);
  return v->as_int();
}

// The request's sampling, limits, stop strings and infokv extension, common to both endpoints.
struct Common {
  bool stream = false;
  int32_t max_tokens = 16;
  SamplerParams sampling;
  std::vector<std::string> stop;
  int32_t priority = 0;
  double budget = 0;  // infokv.budget: a fraction of the prompt the conversation may hold (0: no limit)
};

Common common_of(const JsonValue &body, const ServeSpec &spec, bool chat) {
  Common c;
  const JsonValue *st = member(body, "stream");
  if (st != nullptr && !st->is_null()) {
    if (!st->is_bool()) bad_request("stream must be a boolean", "stream");
    c.stream = st->as_bool();
  }
  const char *mt = chat && member(body, "max_completion_tokens") != nullptr ? "max_completion_tokens" : "max_tokens";
  c.max_tokens = static_cast<int32_t>(int_in(body, mt, chat ? 256 : 16, 1, spec.max_tokens_limit));
  c.sampling.temperature = static_cast<float>(number_in(body, "temperature", 1.0, 0.0, 2.0));
  c.sampling.top_p = static_cast<float>(number_in(body, "top_p", 1.0, 0.0, 1.0));
  if (c.sampling.top_p <= 0) bad_request("top_p must be greater than 0", "top_p");
  c.sampling.top_k = 0;
  c.sampling.min_p = 0;
  if (const JsonValue *sd = member(body, "seed"); sd != nullptr && !sd->is_null()) {
    c.sampling.seed = static_cast<uint64_t>(int_in(body, "seed", 0, INT64_MIN, INT64_MAX));
  } else {
    static std::atomic<uint64_t> counter{std::random_device{}()};  // no seed: every request draws differently
    c.sampling.seed = counter.fetch_add(0x9E3779B97F4A7C15ull);
  }
  const int64_t n = int_in(body, "n", 1, 1, 1);
  (void)n;
  for (const char *k : {"presence_penalty", "frequency_penalty"}) number_in(body, k, 0, -2.0, 2.0);
  if (const JsonValue *s = member(body, "stop"); s != nullptr && !s->is_null()) {
    if (s->is_string()) c.stop.push_back(s->as_string());
    else if (s->is_array() && s->items().size() <= 4) {
      for (const JsonValue &x : s->items()) {
        if (!x.is_string()) bad_request("stop must be a string or an array of up to 4 strings", "stop");
        c.stop.push_back(x.as_string());
      }
    } else {
      bad_request("stop must be a string or an array of up to 4 strings", "stop");
    }
    for (const std::string &x : c.stop)
      if (x.empty() || x.size() > 256) bad_request("each stop string must have 1 to 256 bytes", "stop");
  }
  if (const JsonValue *ext = member(body, "infokv"); ext != nullptr && !ext->is_null()) {
    if (!ext->is_object()) bad_request("infokv must be an object", "infokv");
    c.priority = static_cast<int32_t>(int_in(*ext, "priority", 0, -1000, spec.max_priority));
    if (const JsonValue *b = member(*ext, "budget"); b != nullptr && !b->is_null()) {
      double f = -1;
      if (b->is_number()) f = b->as_number();
      else if (b->is_string() && !b->as_string().empty() && b->as_string().back() == '%')
        f = std::strtod(b->as_string().c_str(), nullptr) / 100.0;
      if (!(f >= 0.01 && f <= 1))
        bad_request("infokv.budget must be a fraction in [0.01, 1] or a percentage (\"25%\")", "infokv.budget");
      if (!spec.can_compress) bad_request("infokv.budget needs a compression policy (the server runs with none)", "infokv.budget");
      c.budget = f;
    }
  }
  return c;
}

// The chat's tokens in the model's template; *system_end: where its system turn (the caller's or the template's
// default one) ends, 0 without one: the prefix most requests share, which the prefix cache keeps.
std::vector<int32_t> chat_prompt(const JsonValue &body, const Model &m, int64_t *system_end) {
  const JsonValue *msgs = member(body, "messages");
  if (msgs == nullptr || !msgs->is_array() || msgs->items().empty())
    bad_request("messages must be a non-empty array", "messages");
  if (msgs->items().size() > 4096) bad_request("too many messages (at most 4096)", "messages");
  std::vector<ChatMessage> out;
  for (const JsonValue &v : msgs->items()) {
    if (!v.is_object()) bad_request("each message must be an object", "messages");
    const JsonValue *role = member(v, "role"), *content = member(v, "content");
    if (role == nullptr || !role->is_string()) bad_request("each message needs a string role", "messages");
    std::string role_s = role->as_string();
    if (role_s == "developer") role_s = "system";
    if (role_s != "system" && role_s != "user" && role_s != "assistant" && role_s != "tool")
      bad_request("unknown role '" + role_s + "'", "messages");
    std::string text;
    if (content == nullptr || content->is_null()) {
      text.clear();
    } else if (content->is_string()) {
      text = content->as_string();
    } else if (content->is_array()) {
      for (const JsonValue &part : content->items()) {
        const JsonValue *type = member(part, "type"), *t = member(part, "text");
        if (!part.is_object() || type == nullptr || !type->is_string() || type->as_string() != "text" || t == nullptr ||
            !t->is_string())
          bad_request("only text content parts are supported", "messages");
        text += t->as_string();
      }
    } else {
      bad_request("message content must be a string or an array of text parts", "messages");
    }
    out.push_back({role_s, text});
  }
  ChatTemplate t;
  try {
    t = chat_template_of(m);
  } catch (const Error &) {
    bad_request("the model has no chat template infokv knows: use /v1/completions", "messages", "no_chat_template");
  }
  // Contents are tokenised as text: "<|im_start|>system" inside a message stays text.
  std::vector<int32_t> ids;
  *system_end = 0;
  for (const ChatPiece &p : t.encode_pieces(m.tokenizer(), out, true, true)) {
    ids.insert(ids.end(), p.ids.begin(), p.ids.end());
    if (p.system) *system_end = static_cast<int64_t>(ids.size());
  }
  return ids;
}

std::vector<int32_t> completion_prompt(const JsonValue &body, const Model &m) {
  const JsonValue *p = member(body, "prompt");
  if (p == nullptr) bad_request("prompt is required", "prompt");
  if (p->is_string()) return m.tokenizer().encode(p->as_string(), true);
  if (p->is_array() && !p->items().empty() && p->items()[0].is_number()) {
    std::vector<int32_t> ids;
    for (const JsonValue &x : p->items()) {
      if (!x.is_integer() || x.as_int() < 0 || x.as_int() >= m.hparams().n_vocab)
        bad_request("prompt token ids must be integers in [0, " + std::to_string(m.hparams().n_vocab) + ")", "prompt");
      ids.push_back(static_cast<int32_t>(x.as_int()));
    }
    return ids;
  }
  if (p->is_array() && p->items().size() == 1 && p->items()[0].is_string())
    return m.tokenizer().encode(p->items()[0].as_string(), true);
  bad_request("prompt must be a string, an array of one string, or an array of token ids", "prompt");
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Streams text out of tokens, holding back what could be the start of a stop string.
struct TextOut {
  StreamingDetokenizer detok;
  std::vector<std::string> stop;
  std::string held;   // decoded, not yet released (may end with a stop string's prefix)
  bool stopped = false;
  TextOut(const Tokenizer &t, std::vector<std::string> s) : detok(t), stop(std::move(s)) {}
  // Feeds text; returns what may be sent now. Sets `stopped` once a stop string appears (it and what follows cut).
  std::string feed(const std::string &piece, bool final) {
    if (stopped) return "";
    held += piece;
    size_t cut = std::string::npos;
    for (const std::string &s : stop) {
      const size_t at = held.find(s);
      if (at != std::string::npos && at < cut) cut = at;
    }
    if (cut != std::string::npos) {
      stopped = true;
      std::string out = held.substr(0, cut);
      held.clear();
      return out;
    }
    size_t keep = 0;  // the longest tail that is a prefix of a stop string
    if (!final)
      for (const std::string &s : stop)
        for (size_t k = std::min(s.size() - 1, held.size()); k > keep; --k)
          if (held.compare(held.size() - k, k, s, 0, k) == 0) {
            keep = k;
            break;
          }
    std::string out = held.substr(0, held.size() - keep);
    held.erase(0, held.size() - keep);
    return out;
  }
};

}  // namespace

int cmd_serve(int argc, char **argv) {
  std::set<std::string> valued = {"model", "host", "port", "api-key", "max-concurrent", "max-body", "max-prompt-tokens",
                                  "max-tokens-limit", "timeout", "strategy", "spill-dir", "cache-dir", "redis",
                                  "cache-mb", "max-batch", "max-prefill", "model-name", "http-threads",
                                  "max-priority"};
  for (const auto &n : session_option_names()) valued.insert(n);
  Args a(argc, argv, 2, valued, {"no-prefix-cache"});
  ServeSpec spec;
  spec.host = a.str("host", "127.0.0.1");
  spec.port = static_cast<int>(a.integer("port", 8080, 0, 65535));
  spec.api_key = a.str("api-key", std::getenv("INFOKV_API_KEY") != nullptr ? std::getenv("INFOKV_API_KEY") : "");
  spec.max_concurrent = a.integer("max-concurrent", 64, 1, 100000);
  spec.max_body = a.integer("max-body", 1 << 20, 1024, int64_t{1} << 30);
  spec.max_tokens_limit = a.integer("max-tokens-limit", 4096, 1, 1 << 20);
  spec.timeout_s = a.number("timeout", 600, 1, 86400);
  // Each request in flight holds an HTTP thread until it ends: enough threads for --max-concurrent of them plus a
  // few for /health, /metrics and the ones answered 429.
  spec.threads_http = static_cast<int>(a.integer("http-threads", spec.max_concurrent + 8, 2, 100008));
  if (spec.threads_http < spec.max_concurrent + 4)
    fail(Status::invalid_argument, "--http-threads must be at least --max-concurrent + 4");
  spec.max_priority = static_cast<int32_t>(a.integer("max-priority", 0, -1000, 1000));
  const bool loopback = spec.host == "127.0.0.1" || spec.host == "localhost" || spec.host == "::1";
  if (!loopback && spec.api_key.empty())
    fail(Status::invalid_argument, "serving on " + spec.host + " (not loopback) needs --api-key (or INFOKV_API_KEY)");

  const std::string path = model_path_from(a);
  const std::shared_ptr<const Model> model = Model::load(path);
  spec.model_name = a.str("model-name", std::filesystem::path(path).stem().string());
  spec.max_prompt = a.integer("max-prompt-tokens", model->hparams().n_ctx_train > 0 ? model->hparams().n_ctx_train : 4096, 1, 1 << 24);

  EngineOptions eo;
  eo.session = session_options_from(a);
  if (!a.has("policy") && !eo.session.compression.enabled()) {
    // Compression only when memory runs out or a request's infokv.budget asks for it.
    eo.session.compression.policy = PolicyKind::auto_;
    eo.session.compression.budget_fraction = 1.0;
  }
  eo.strategy = parse_strategy(a.str("strategy", "auto"));
  eo.spill_dir = a.str("spill-dir");
  eo.max_batch = static_cast<int32_t>(a.integer("max-batch", 8, 1, 4096));
  // Prompt tokens one engine step prefills before it decodes (default: one prefill chunk; 0: no limit).
  eo.max_prefill_tokens = static_cast<int32_t>(a.integer("max-prefill", eo.session.ubatch, 0, 1 << 24));
  eo.prefix_cache = !a.flag("no-prefix-cache");
  eo.prefix.memory_bytes = a.integer("cache-mb", 256, 0, 1 << 20) << 20;
  eo.prefix.disk_dir = a.str("cache-dir");
  eo.prefix.redis = a.str("redis");
  spec.can_compress = eo.session.compression.enabled();
  Scheduler sched(model, eo);
  {
    const Scheduler::Snapshot s0 = sched.snapshot();
    spec.pool_blocks = s0.blocks_total;
    spec.block_size = eo.session.block_size;
    spec.n_layer = model->hparams().n_layer;
  }
  Metrics metrics;
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> next_id{1};
  const Clock::time_point started = Clock::now();

  httplib::Server svr;
  svr.new_task_queue = [&spec] { return new httplib::ThreadPool(static_cast<size_t>(spec.threads_http)); };
  svr.set_payload_max_length(static_cast<size_t>(spec.max_body));
  svr.set_read_timeout(5, 0);
  svr.set_write_timeout(30, 0);
  svr.set_keep_alive_timeout(5);

  auto send_error = [](httplib::Response &res, const HttpError &e) {
    res.status = e.status;
    res.set_content(error_body(e), "application/json");
  };
  svr.set_pre_routing_handler([&](const httplib::Request &req, httplib::Response &res) {
    if (spec.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string want = "Bearer " + spec.api_key;
    if (!constant_time_equal(auth, want)) {
      send_error(res, {401, "invalid or missing API key (Authorization: Bearer KEY)", "authentication_error", "", "invalid_api_key"});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_error_handler([&](const httplib::Request &, httplib::Response &res) {
    if (!res.body.empty()) return;
    const char *type = res.status == 404 ? "not_found_error" : res.status == 413 ? "request_too_large" : "invalid_request_error";
    res.set_content(error_body({res.status, "HTTP " + std::to_string(res.status), type, "", ""}), "application/json");
  });
  svr.set_exception_handler([&](const httplib::Request &, httplib::Response &res, std::exception_ptr) {
    send_error(res, {500, "internal error", "server_error", "", ""});
  });

  svr.Get("/health", [](const httplib::Request &, httplib::Response &res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  svr.Get("/v1/models", [&](const httplib::Request &, httplib::Response &res) {
    JsonObject m;
    m.str("id", spec.model_name).str("object", "model").integer("created", unix_now()).str("owned_by", "infokv");
    res.set_content("{\"object\":\"list\",\"data\":[" + m.dump() + "]}", "application/json");
  });
  svr.Get("/metrics", [&](const httplib::Request &, httplib::Response &res) {
    const Scheduler::Snapshot s = sched.snapshot();
    const double up = std::chrono::duration<double>(Clock::now() - started).count();
    std::string t;
    auto line = [&t](const char *name, const char *help, const char *type, double v) {
      t += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + json_num(v) + "\n";
    };
    line("infokv_requests_total", "Requests received.", "counter", static_cast<double>(metrics.requests.load()));
    line("infokv_requests_completed_total", "Requests answered in full.", "counter", static_cast<double>(metrics.completed.load()));
    line("infokv_requests_failed_total", "Requests that failed after they were accepted.", "counter", static_cast<double>(metrics.failed.load()));
    line("infokv_requests_rejected_total", "Requests refused (invalid, too large, too many).", "counter", static_cast<double>(metrics.rejected.load()));
    line("infokv_requests_cancelled_total", "Requests whose client went away.", "counter", static_cast<double>(metrics.cancelled.load()));
    line("infokv_prompt_tokens_total", "Prompt tokens received.", "counter", static_cast<double>(metrics.prompt_tokens.load()));
    line("infokv_generated_tokens_total", "Tokens generated.", "counter", static_cast<double>(metrics.generated_tokens.load()));
    line("infokv_generated_tokens_per_second", "Tokens generated per second since start.", "gauge",
         static_cast<double>(metrics.generated_tokens.load()) / std::max(up, 1e-9));
    line("infokv_requests_in_flight", "Requests accepted and not yet answered.", "gauge", static_cast<double>(in_flight.load()));
    line("infokv_queue_length", "Turns queued or running in the engine.", "gauge", static_cast<double>(s.pending));
    line("infokv_pool_bytes_held", "KV pool bytes held by conversations.", "gauge", static_cast<double>(s.bytes_used));
    line("infokv_pool_bytes_uncompressed", "What the running conversations would hold uncompressed.", "gauge", static_cast<double>(s.bytes_uncompressed));
    line("infokv_pool_blocks_free", "Free KV blocks.", "gauge", static_cast<double>(s.blocks_free));
    line("infokv_pool_blocks_total", "KV blocks in the pool.", "gauge", static_cast<double>(s.blocks_total));
    line("infokv_compressions_total", "Conversations compressed to make room.", "counter", static_cast<double>(s.stats.compressions));
    line("infokv_moves_total", "Conversations moved out to make room.", "counter", static_cast<double>(s.stats.moves));
    line("infokv_recomputes_total", "Conversations dropped to be recomputed.", "counter", static_cast<double>(s.stats.recomputes));
    line("infokv_prefix_cache_hits_total", "Requests started from the prefix cache.", "counter", static_cast<double>(s.stats.prefix_hits));
    line("infokv_prefix_cache_hit_tokens_total", "Prompt tokens not prefilled thanks to the prefix cache.", "counter", static_cast<double>(s.stats.prefix_hit_tokens));
    res.set_content(t, "text/plain; version=0.0.4");
  });

  auto handle = [&](const httplib::Request &req, httplib::Response &res, bool chat) {
    ++metrics.requests;
    Common c;
    std::shared_ptr<Job> job = std::make_shared<Job>();
    try {
      const JsonValue body = [&] {
        try {
          return JsonValue::parse(req.body, static_cast<int32_t>(Status::invalid_argument), "request body");
        } catch (const Error &e) {
          bad_request(std::string("malformed JSON: ") + e.what());
        }
      }();
      if (!body.is_object()) bad_request("the body must be a JSON object");
      c = common_of(body, spec, chat);
      job->prompt = chat ? chat_prompt(body, sched.model(), &job->system_end) : completion_prompt(body, sched.model());
      if (job->prompt.empty()) bad_request("the prompt is empty", chat ? "messages" : "prompt");
      if (static_cast<int64_t>(job->prompt.size()) > spec.max_prompt)
        bad_request("the prompt has " + std::to_string(job->prompt.size()) + " tokens; this server takes at most " +
                        std::to_string(spec.max_prompt), chat ? "messages" : "prompt", "context_length_exceeded");
      const int64_t whole = static_cast<int64_t>(job->prompt.size()) + c.max_tokens;
      if (spec.n_layer * ((whole + spec.block_size - 1) / spec.block_size) > spec.pool_blocks)
        bad_request("the prompt (" + std::to_string(job->prompt.size()) + " tokens) and max_tokens (" +
                        std::to_string(c.max_tokens) + ") do not fit this server's KV pool even alone",
                    chat ? "messages" : "prompt", "context_length_exceeded");
    } catch (const HttpError &e) {
      ++metrics.rejected;
      send_error(res, e);
      return;
    }
    // One slot of --max-concurrent, given back when the last holder (this handler, or the stream) lets go.
    struct Slot {
      explicit Slot(std::atomic<int64_t> *c) : n(c) { n->fetch_add(1); }
      ~Slot() { n->fetch_sub(1); }
      Slot(const Slot &) = delete;
      Slot &operator=(const Slot &) = delete;
      std::atomic<int64_t> *n;
    };
    auto slot = std::make_shared<Slot>(&in_flight);
    const bool over = in_flight.load() > spec.max_concurrent;
    if (over) {
      ++metrics.rejected;
      send_error(res, {429, "too many requests in flight (" + std::to_string(spec.max_concurrent) + "): retry later",
                       "rate_limit_error", "", "rate_limit_exceeded"});
      return;
    }
    job->max_tokens = c.max_tokens;
    job->sampling = c.sampling;
    job->priority = c.priority;
    if (c.budget > 0) job->memory_limit = std::max<int64_t>(1, static_cast<int64_t>(c.budget * static_cast<double>(job->prompt.size())));
    metrics.prompt_tokens += static_cast<int64_t>(job->prompt.size());
    const int64_t prompt_n = static_cast<int64_t>(job->prompt.size());
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const int64_t created = unix_now();
    sched.submit(job);
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(spec.timeout_s * 1000));
    const Tokenizer &tok = sched.model().tokenizer();
    auto finish_reason = [](const Job &j, const TextOut &out) { return out.stopped ? "stop" : j.length_cut ? "length" : "stop"; };

    if (!c.stream) {
      TextOut out(tok, c.stop);
      std::string text;
      int64_t n = 0;
      bool timed_out = false;
      for (;;) {
        std::vector<int32_t> got;
        if (!job->take(got, deadline)) {
          timed_out = true;
          break;
        }
        for (int32_t t : got) {
          ++n;
          text += out.feed(out.detok.push(t), false);
        }
        if (out.stopped) break;
        std::lock_guard<std::mutex> lk(job->mu);
        if (job->done && job->tokens.empty()) break;
      }
      if (!out.stopped) text += out.feed(out.detok.flush(), true);
      if (out.stopped || timed_out) {
        job->cancel = true;
        sched.wake();
      }
      metrics.generated_tokens += n;
      std::string err;
      {
        std::lock_guard<std::mutex> lk(job->mu);
        err = job->error;
      }
      if (timed_out) {
        ++metrics.failed;
        send_error(res, {504, "the request took longer than " + json_num(spec.timeout_s) + " s", "server_error", "", "timeout"});
        return;
      }
      if (!err.empty() && !out.stopped) {
        ++metrics.failed;
        send_error(res, {503, "the request could not be served: " + err, "server_error", "", ""});
        return;
      }
      ++metrics.completed;
      JsonObject usage;
      usage.integer("prompt_tokens", prompt_n).integer("completion_tokens", n).integer("total_tokens", prompt_n + n);
      JsonObject choice;
      choice.integer("index", 0);
      if (chat) {
        JsonObject msg;
        msg.str("role", "assistant").str("content", text);
        choice.raw("message", msg.dump());
      } else {
        choice.str("text", text);
      }
      choice.raw("logprobs", "null").str("finish_reason", finish_reason(*job, out));
      JsonObject o;
      o.str("id", id).str("object", chat ? "chat.completion" : "text_completion").integer("created", created)
          .str("model", spec.model_name).raw("choices", "[" + choice.dump() + "]").raw("usage", usage.dump());
      res.set_content(o.dump(), "application/json");
      return;
    }

    // Streaming: server-sent events, one chunk per piece of text; [DONE] at the end.
    struct StreamState {
      std::shared_ptr<Job> job;
      std::shared_ptr<Slot> slot;
      TextOut out;
      bool sent_role = false, finished = false;
      int64_t n = 0;
      StreamState(std::shared_ptr<Job> j, std::shared_ptr<Slot> sl, const Tokenizer &t, std::vector<std::string> s)
          : job(std::move(j)), slot(std::move(sl)), out(t, std::move(s)) {}
    };
    auto st = std::make_shared<StreamState>(job, slot, tok, c.stop);
    auto chunk = [chat, id, created, &spec](const std::string &text, const char *reason, bool role) {
      JsonObject choice;
      choice.integer("index", 0);
      if (chat) {
        JsonObject delta;
        if (role) delta.str("role", "assistant");
        if (!text.empty() || !role) delta.str("content", text);
        choice.raw("delta", delta.dump());
      } else {
        choice.str("text", text);
      }
      choice.raw("logprobs", "null").raw("finish_reason", reason != nullptr ? json_str(reason) : "null");
      JsonObject o;
      o.str("id", id).str("object", chat ? "chat.completion.chunk" : "text_completion").integer("created", created)
          .str("model", spec.model_name).raw("choices", "[" + choice.dump() + "]");
      return "data: " + o.dump() + "\n\n";
    };
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [st, chunk, chat, deadline, &metrics, &sched](size_t, httplib::DataSink &sink) {
          if (st->finished) return false;
          if (chat && !st->sent_role) {
            st->sent_role = true;
            const std::string first = chunk("", nullptr, true);
            if (!sink.write(first.data(), first.size())) return false;
          }
          std::vector<int32_t> got;
          const Clock::time_point wait = std::min(deadline, Clock::now() + std::chrono::milliseconds(200));
          const bool any = st->job->take(got, wait);
          if (!any && Clock::now() >= deadline) {
            st->job->cancel = true;
            sched.wake();
            const std::string e = "data: " + error_body({504, "timeout", "server_error", "", "timeout"}) + "\n\n";
            sink.write(e.data(), e.size());
            st->finished = true;
            ++metrics.failed;
            sink.done();
            return true;
          }
          if (!sink.is_writable()) return false;  // the client went away: the releaser cancels the request
          std::string text;
          for (int32_t t : got) {
            ++st->n;
            text += st->out.feed(st->out.detok.push(t), false);
          }
          bool done;
          std::string err;
          {
            std::lock_guard<std::mutex> lk(st->job->mu);
            done = st->job->done && st->job->tokens.empty();
            err = st->job->error;
          }
          if (st->out.stopped) done = true;
          if (done && !st->out.stopped) text += st->out.feed(st->out.detok.flush(), true);
          if (!text.empty()) {
            const std::string ch = chunk(text, nullptr, false);
            if (!sink.write(ch.data(), ch.size())) return false;
          }
          if (!done) return true;
          std::string tail;
          if (!err.empty() && !st->out.stopped)
            tail = "data: " + error_body({503, "the request could not be served: " + err, "server_error", "", ""}) + "\n\n";
          else
            tail = chunk("", st->out.stopped ? "stop" : st->job->length_cut ? "length" : "stop", false);
          tail += "data: [DONE]\n\n";
          sink.write(tail.data(), tail.size());
          st->finished = true;
          if (st->out.stopped) {
            st->job->cancel = true;
            sched.wake();
          }
          (err.empty() || st->out.stopped ? metrics.completed : metrics.failed)++;
          sink.done();
          return true;
        },
        [st, &metrics, &sched](bool) {
          // The stream ended (done, failed or the client disconnected): whatever is still running is cancelled.
          if (!st->finished) {
            ++metrics.cancelled;
            st->job->cancel = true;
            sched.wake();
          }
          metrics.generated_tokens += st->n;
          st->slot.reset();
        });
  };
  svr.Post("/v1/chat/completions", [&](const httplib::Request &q, httplib::Response &r) { handle(q, r, true); });
  svr.Post("/v1/completions", [&](const httplib::Request &q, httplib::Response &r) { handle(q, r, false); });

  int port = spec.port;
  if (port == 0) {
    port = svr.bind_to_any_port(spec.host);
    if (port < 0) fail(Status::io, "cannot bind " + spec.host);
  } else if (!svr.bind_to_port(spec.host, port)) {
    fail(Status::io, "cannot bind " + spec.host + ":" + std::to_string(port) + " (in use?)");
  }
  std::fprintf(stderr, "infokv serve: %s on http://%s:%d (model %s; strategy %s; prefix cache %s)\n",
               spec.model_name.c_str(), spec.host.c_str(), port, path.c_str(), strategy_name(eo.strategy),
               eo.prefix_cache ? "on" : "off");
  std::printf("listening on %s:%d\n", spec.host.c_str(), port);
  std::fflush(stdout);
  // SIGINT/SIGTERM: the handler only sets a flag (and lets a second signal kill); a watcher thread ends every job
  // (their handlers answer at once) and stops the server.
  static std::atomic<bool> stop_requested{false};
  auto on_signal = [](int sig) {
    stop_requested.store(true);
    std::signal(sig, SIG_DFL);
  };
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done.load()) {
      if (stop_requested.load()) {
        sched.shutdown();
        svr.stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  svr.listen_after_bind();
  done.store(true);
  watcher.join();
  return 0;
}

}  // namespace cli
}  // namespace infokv
