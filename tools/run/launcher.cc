// `loom run`: the event loop that starts the ranks, relays their output and
// signals, and reaps them (options.cc parses the command line, binding.cc
// picks the cores).
#include "tools/run/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/log.h"
#include "transports/shm/context.h"

extern char** environ;

namespace loom::tools {
namespace {

// A line longer than this is split, so a rank writing binary data without
// newlines cannot make the launcher buffer without bound.
constexpr size_t kMaxLineBytes = size_t{1} << 20;

}  // namespace

std::string LineTagger::Feed(std::string_view data) {
  std::string out;
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      pending_.append(data);
      if (pending_.size() >= kMaxLineBytes) out += Flush();
      break;
    }
    out += prefix_;
    out += pending_;
    out.append(data.substr(0, nl + 1));
    pending_.clear();
    data.remove_prefix(nl + 1);
  }
  return out;
}

std::string LineTagger::Flush() {
  if (pending_.empty()) return "";
  std::string out = prefix_ + pending_ + "\n";
  pending_.clear();
  return out;
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    std::string s = "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
    if (WCOREDUMP(wait_status)) s += " (core dumped)";
    return s;
  }
  return "changed state (wait status " + std::to_string(wait_status) + ")";
}

int ExitCodeOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return kExitLaunchError;
}

std::optional<std::string> FindInPath(std::string_view name, std::string_view path) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string_view::npos) return std::string(name);
  while (true) {
    size_t colon = path.find(':');
    std::string_view dir = path.substr(0, colon);
    std::string candidate = (dir.empty() ? std::string(".") : std::string(dir)) + "/";
    candidate += name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    if (colon == std::string_view::npos) return std::nullopt;
    path.remove_prefix(colon + 1);
  }
}

std::string FormatRootAddress(std::string_view host, int port) {
  bool bracket = host.find(':') != std::string_view::npos && !host.starts_with('[');
  std::string s = bracket ? "[" + std::string(host) + "]" : std::string(host);
  return s + ":" + std::to_string(port);
}

// ---- Launch ----------------------------------------------------------------

namespace {

// Owns one file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }

  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

void Complain(const std::string& line) {
  std::fprintf(stderr, "loom run: %s\n", line.c_str());
}

std::string Plural(size_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// A child's pipes and exec status must not land on fds 0-2 (dup2 onto
// themselves would keep them close-on-exec), so fill any closed std fd first.
void EnsureStdFdsOpen() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      int opened = open("/dev/null", O_RDWR);  // lowest free fd: this one
      if (opened > 2) close(opened);
    }
  }
}

Status MakePipe(Fd* read_end, Fd* write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return SystemError("pipe2", errno);
  read_end->Reset();
  write_end->Reset();
  *read_end = Fd(fds[0]);
  *write_end = Fd(fds[1]);
  return Status::Ok();
}

// Writes all of `data`, waiting when `fd` is non-blocking. Output lost to a
// closed reader (EPIPE) is dropped: the job must go on.
void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 100);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return;
    }
  }
}

Result<std::string> RandomJobId() {
  Fd fd(open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return SystemError("open /dev/urandom", errno);
  unsigned char bytes[8];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = read(fd.get(), bytes + got, sizeof bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return SystemError("read /dev/urandom", n < 0 ? errno : EIO);
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

// A port that was free on 127.0.0.1 a moment ago. Rank 0 binds it soon after;
// another process could take it in between, which rank 0 reports.
Result<int> FindFreePort() {
  Fd sock(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (sock.get() < 0) return SystemError("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return SystemError("bind 127.0.0.1:0 to find a free port", errno);
  }
  socklen_t len = sizeof addr;
  if (getsockname(sock.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return SystemError("getsockname", errno);
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

Status MakeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string prefix = dir.substr(0, pos);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return SystemError("cannot create --output-dir '" + prefix + "'", errno);
    }
  }
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InvalidArgument("--output-dir '" + dir + "' is not a directory");
  }
  return Status::Ok();
}

// Blocks the signals the launcher handles and reads them from a signalfd;
// restores the mask and the dispositions it changed when destroyed, and in a
// child before exec (RestoreInChild is async-signal-safe).
class SignalScope {
 public:
  SignalScope() {
    sigemptyset(&blocked_);
    sigaddset(&blocked_, SIGCHLD);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction current {};
      sigaction(sig, nullptr, &current);
      if (current.sa_handler != SIG_IGN) sigaddset(&blocked_, sig);  // see launcher.h
    }
    sigprocmask(SIG_BLOCK, &blocked_, &old_mask_);
    // An inherited SIG_IGN for SIGCHLD would make the kernel reap the ranks
    // before we can read their status; SIGPIPE must not kill the launcher
    // when its own stdout reader goes away.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &dfl, &old_chld_);
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old_pipe_);
    fd_ = Fd(signalfd(-1, &blocked_, SFD_NONBLOCK | SFD_CLOEXEC));
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  ~SignalScope() {
    fd_.Reset();
    RestoreInChild();
  }

  void RestoreInChild() const {
    sigaction(SIGCHLD, &old_chld_, nullptr);
    sigaction(SIGPIPE, &old_pipe_, nullptr);
    sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  int fd() const { return fd_.get(); }

 private:
  sigset_t blocked_;
  sigset_t old_mask_;
  struct sigaction old_chld_ {};
  struct sigaction old_pipe_ {};
  Fd fd_;
};

// One stream of one rank relayed with --tag-output.
struct OutputPump {
  Fd fd;           // read end, non-blocking; closed at EOF
  int target = 1;  // launcher fd the tagged lines go to
  LineTagger tagger{""};
};

struct RankProcess {
  pid_t pid = -1;
  bool running = false;  // forked and not yet reaped
  OutputPump out, err;
};

// What one child needs between fork and exec; everything is prepared before
// fork because only async-signal-safe calls are allowed after it.
struct ChildSetup {
  pid_t parent;
  const char* path;
  char* const* argv;
  char* const* envp;
  int stdin_fd;  // -1: keep the launcher's
  int stdout_fd;
  int stderr_fd;
  int status_fd;  // exec failure: the child writes errno here
  const SignalScope* signals;
  const cpu_set_t* cpus;  // null: not bound
};

[[noreturn]] void ExecChild(const ChildSetup& s) {
  setpgid(0, 0);
  int err = 0;
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) err = errno;
  if (getppid() != s.parent) _exit(kExitLaunchError);  // launcher died before prctl
  if (s.stdin_fd >= 0 && dup2(s.stdin_fd, 0) < 0) err = errno;
  if (s.stdout_fd >= 0 && dup2(s.stdout_fd, 1) < 0) err = errno;
  if (s.stderr_fd >= 0 && dup2(s.stderr_fd, 2) < 0) err = errno;
  if (s.cpus != nullptr && sched_setaffinity(0, sizeof(cpu_set_t), s.cpus) != 0) err = errno;
  s.signals->RestoreInChild();
  if (err == 0) {
    execve(s.path, s.argv, s.envp);
    err = errno;
  }
  ssize_t ignored = write(s.status_fd, &err, sizeof err);
  (void)ignored;
  _exit(err == ENOENT ? kExitNotFound : kExitNotExecutable);
}

// The running job: starts the ranks, then turns signals, exits, output and
// deadlines into actions until every rank is reaped.
class Job {
 public:
  Job(const LaunchOptions& options, const SignalScope& signals)
      : options_(options), signals_(signals), ranks_(static_cast<size_t>(options.num_ranks)) {
    if (options_.timeout_s > 0) {
      auto ms = static_cast<int64_t>(std::ceil(options_.timeout_s * 1000));
      job_deadline_ = Deadline::After(std::chrono::milliseconds(ms));
    }
  }

  // Forks rank `rank`. On an exec failure, reports it and starts terminating
  // the ranks already running; returns false when no further rank should start.
  bool Start(int rank, const std::string& path, std::vector<std::string>& env, Fd* devnull,
             const std::vector<int>& cpus) {
    RankProcess& rp = ranks_[static_cast<size_t>(rank)];
    std::vector<char*> argv, envp;
    for (const std::string& a : options_.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    Fd out_w, err_w, status_r, status_w;
    Status st = MakePipe(&status_r, &status_w);
    if (st.ok() && options_.tag_output) {
      st = MakePipe(&rp.out.fd, &out_w);
      if (st.ok()) st = MakePipe(&rp.err.fd, &err_w);
    } else if (st.ok() && !options_.output_dir.empty()) {
      std::string base = options_.output_dir + "/rank." + std::to_string(rank);
      out_w = Fd(open((base + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      err_w = Fd(open((base + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (out_w.get() < 0 || err_w.get() < 0) {
        st = SystemError("open " + base + ".{out,err}", errno);
      }
    }
    if (!st.ok()) return FailToStart(rank, st.ToString(), kExitLaunchError, running_);

    cpu_set_t cpu_set;
    CPU_ZERO(&cpu_set);
    for (int c : cpus) CPU_SET(c, &cpu_set);
    bool stdin_to_rank = rank == 0 && !isatty(0);
    ChildSetup setup{.parent = getpid(),
                     .path = path.c_str(),
                     .argv = argv.data(),
                     .envp = envp.data(),
                     .stdin_fd = stdin_to_rank ? -1 : devnull->get(),
                     .stdout_fd = out_w.get(),
                     .stderr_fd = err_w.get(),
                     .status_fd = status_w.get(),
                     .signals = &signals_,
                     .cpus = cpus.empty() ? nullptr : &cpu_set};
    pid_t pid = fork();
    if (pid < 0) {
      return FailToStart(rank, SystemError("fork", errno).ToString(), kExitLaunchError, running_);
    }
    if (pid == 0) ExecChild(setup);
    // Also here, so signals sent before the child's own setpgid reach its group.
    setpgid(pid, pid);
    rp.pid = pid;
    rp.running = true;
    ++running_;
    for (OutputPump* p : {&rp.out, &rp.err}) {
      if (p->fd.get() >= 0) fcntl(p->fd.get(), F_SETFL, O_NONBLOCK);
    }
    rp.out.target = 1;
    rp.err.target = 2;
    rp.out.tagger = rp.err.tagger = LineTagger("[" + std::to_string(rank) + "] ");
    status_w.Reset();

    int child_errno = 0;
    ssize_t n;
    do {
      n = read(status_r.get(), &child_errno, sizeof child_errno);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return true;  // EOF: exec succeeded and closed the pipe
    return FailToStart(rank, "cannot execute '" + path + "': " + std::strerror(child_errno),
                       child_errno == ENOENT ? kExitNotFound : kExitNotExecutable, running_ - 1);
  }

  // Runs until every started rank is reaped; returns the exit code.
  int Run() {
    while (running_ > 0) {
      std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
      std::vector<OutputPump*> pumps{nullptr};
      for (RankProcess& rp : ranks_) {
        for (OutputPump* p : {&rp.out, &rp.err}) {
          if (p->fd.get() < 0) continue;
          fds.push_back({p->fd.get(), POLLIN, 0});
          pumps.push_back(p);
        }
      }
      int rc = poll(fds.data(), fds.size(), WakeInMs());
      if (rc < 0 && errno != EINTR) {
        // Cannot watch the job any more: end it and wait for the ranks blindly.
        Complain(SystemError("poll", errno).ToString() + "; killing the job");
        Terminate(kExitLaunchError, "");
        Kill();
        Reap(/*block=*/true);
      }
      if (rc > 0 && fds[0].revents != 0) HandleSignals();
      for (size_t i = 1; rc > 0 && i < fds.size(); ++i) {
        if (fds[i].revents != 0) Pump(*pumps[i]);
      }
      CheckDeadlines();
    }
    // Every rank is gone; take what is left in the pipes without waiting for
    // an EOF that a rank's leftover child could hold back forever.
    for (RankProcess& rp : ranks_) {
      for (OutputPump* p : {&rp.out, &rp.err}) {
        while (p->fd.get() >= 0 && Pump(*p)) {
        }
        if (p->fd.get() >= 0) WriteAll(p->target, p->tagger.Flush());
      }
    }
    if (terminating_) {
      // Ranks ended during setup may have left shared memory named.
      std::vector<pid_t> pids;
      for (const RankProcess& rp : ranks_) {
        if (rp.pid > 0) pids.push_back(rp.pid);
      }
      if (const size_t n = RemoveSegmentsLeftBy(pids)) {
        Complain("removed " + Plural(n, "shared-memory segment") +
                 " that ended ranks left in /dev/shm");
      }
    }
    return terminating_ ? exit_code_ : 0;
  }

 private:
  // `others`: ranks started before this one and still running.
  bool FailToStart(int rank, const std::string& why, int code, size_t others) {
    Terminate(code, "rank " + std::to_string(rank) + ": " + why +
                        (others > 0 ? "; terminating the " + Plural(others, "started rank") : ""));
    return false;
  }

  int WakeInMs() const {
    constexpr int64_t kCapMs = 60 * 1000;
    Deadline next = Deadline::Never();
    if (!terminating_) next = job_deadline_;
    if (terminating_ && !killed_) next = kill_deadline_;
    return static_cast<int>(next.RemainingMs(kCapMs));
  }

  void HandleSignals() {
    signalfd_siginfo info;
    while (read(signals_.fd(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) {
        Reap(/*block=*/false);
      } else if (!terminating_) {
        Terminate(128 + sig,
                  "received signal " + std::to_string(sig) + " (" + strsignal(sig) +
                      "); forwarding it to " + Plural(running_, "rank"),
                  sig);
      } else if (!killed_) {
        Complain("received signal " + std::to_string(sig) + " again; killing the job");
        Kill();
      }
    }
  }

  // Reaps every exited rank; with `block`, waits until none is left.
  void Reap(bool block) {
    int status = 0;
    pid_t pid;
    while (running_ > 0 && (pid = waitpid(-1, &status, block ? 0 : WNOHANG)) != 0) {
      if (pid < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (size_t r = 0; r < ranks_.size(); ++r) {
        RankProcess& rp = ranks_[r];
        if (rp.pid != pid || !rp.running) continue;
        rp.running = false;
        --running_;
        bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        if (failed && !terminating_) {
          std::string line = "rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ") " +
                             DescribeWaitStatus(status);
          if (running_ > 0) line += "; terminating the other " + Plural(running_, "rank");
          Terminate(ExitCodeOf(status), line);
        }
      }
    }
  }

  // Reads once from a pump; returns false at EOF, error or nothing to read.
  bool Pump(OutputPump& p) {
    char buf[65536];
    ssize_t n = read(p.fd.get(), buf, sizeof buf);
    if (n > 0) {
      WriteAll(p.target, p.tagger.Feed(std::string_view(buf, static_cast<size_t>(n))));
      return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    WriteAll(p.target, p.tagger.Flush());
    p.fd.Reset();
    return false;
  }

  void CheckDeadlines() {
    if (!terminating_ && job_deadline_.expired()) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", options_.timeout_s);
      Terminate(kExitTimeout, std::string("timed out after ") + secs + " s; terminating " +
                                  Plural(running_, "rank"));
    }
    if (terminating_ && !killed_ && kill_deadline_.expired() && running_ > 0) {
      Complain(Plural(running_, "rank") + " still running " +
               std::to_string(options_.kill_grace_ms) + " ms after SIGTERM; sending SIGKILL");
      Kill();
    }
  }

  // Enters the terminating state once: keeps `code` as the exit code, prints
  // `line` (unless empty) and sends `sig` to every running rank's group.
  void Terminate(int code, const std::string& line, int sig = SIGTERM) {
    if (terminating_) return;
    terminating_ = true;
    exit_code_ = code;
    if (!line.empty()) Complain(line);
    SignalAll(sig);
    kill_deadline_ =
        Deadline::At(Deadline::Clock::now() + std::chrono::milliseconds(options_.kill_grace_ms));
  }

  void Kill() {
    killed_ = true;
    SignalAll(SIGKILL);
  }

  // Only unreaped ranks: a reaped rank's pid (and group id) may be reused.
  void SignalAll(int sig) {
    for (const RankProcess& rp : ranks_) {
      if (rp.running) kill(-rp.pid, sig);
    }
  }

  const LaunchOptions& options_;
  const SignalScope& signals_;
  std::vector<RankProcess> ranks_;
  size_t running_ = 0;
  bool terminating_ = false;  // a failure, signal or timeout ended the job
  bool killed_ = false;       // SIGKILL sent
  int exit_code_ = 0;         // meaningful once terminating_
  Deadline job_deadline_ = Deadline::Never();
  Deadline kill_deadline_ = Deadline::Never();
};

}  // namespace

int Launch(const LaunchOptions& options) {
  EnsureStdFdsOpen();
  Result<std::string> job_id = RandomJobId();
  Result<int> port = options.root_port != 0 ? Result<int>(options.root_port) : FindFreePort();
  for (const Status& st : {job_id.status(), port.status()}) {
    if (!st.ok()) {
      Complain(st.ToString());
      return kExitLaunchError;
    }
  }
  std::string root = FormatRootAddress(options.root_host, *port);
  std::vector<std::vector<std::string>> envs;
  for (int r = 0; r < options.num_ranks; ++r) {
    envs.push_back(RankEnvironment(options, r, root, *job_id, environ));
  }

  // Look the command up once, in the ranks' PATH (as `env PATH=... cmd` does).
  std::string path_var = "/usr/local/bin:/usr/bin:/bin";  // when PATH is unset
  for (const std::string& e : envs[0]) {
    if (e.starts_with("PATH=")) path_var = e.substr(5);
  }
  std::optional<std::string> path = FindInPath(options.command[0], path_var);
  if (!path) {
    Complain("command not found: '" + options.command[0] + "' (searched PATH=" + path_var + ")");
    return kExitNotFound;
  }
  if (!options.output_dir.empty()) {
    if (Status st = MakeDirs(options.output_dir); !st.ok()) {
      Complain(st.ToString());
      return kExitLaunchError;
    }
  }
  Fd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (devnull.get() < 0) {
    Complain(SystemError("open /dev/null", errno).ToString());
    return kExitLaunchError;
  }

  const std::vector<int> allowed = AllowedCpus();
  Result<Placement> placement = Bindings(options.bind_to, options.num_ranks,
                                         GroupCpus(allowed, CoreCpusList),
                                         GroupCpus(allowed, NumaNodeOf));
  if (!placement.ok()) {
    Complain(placement.status().message());
    return kExitLaunchError;
  }
  if (!placement->note.empty()) Complain(placement->note);
  for (int r = 0; r < options.num_ranks; ++r) {
    const std::vector<int>& cpus = placement->cpus[static_cast<size_t>(r)];
    LOOM_INFO(log::kInit, "loom run: rank %d %s", r,
              cpus.empty() ? "not bound" : ("bound to CPUs " + CpuListString(cpus)).c_str());
  }

  SignalScope signals;
  if (signals.fd() < 0) {
    Complain(SystemError("signalfd", errno).ToString());
    return kExitLaunchError;
  }
  Job job(options, signals);
  for (int r = 0; r < options.num_ranks; ++r) {
    if (!job.Start(r, *path, envs[static_cast<size_t>(r)], &devnull,
                   placement->cpus[static_cast<size_t>(r)])) {
      break;
    }
  }
  return job.Run();
}

}  // namespace loom::tools
