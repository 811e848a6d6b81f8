// fleet run|status|plot: federated training across many daemons. The orchestration and the aggregation (numpy)
// live in the Python client, traind_client.fleet; these commands check their flags like every other command and
// then run `python3 -m traind_client.fleet <command> ...` with them, passing its exit code through. The
// interpreter is $TRAIND_PYTHON, else /usr/bin/python3 (Debian's, which has numpy and grpcio); the package comes
// from python3-traind-client or `pip install ./client/python`.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/commands/commands.h"
#include "client/commands/common.h"

namespace traind::cli {
namespace {

std::string PythonInterpreter() {
  const char* chosen = std::getenv("TRAIND_PYTHON");
  return chosen != nullptr && *chosen != '\0' ? chosen : "/usr/bin/python3";
}

// Runs `argv` with the terminal's stdin/stdout/stderr; its exit status, or -1 when it could not start.
int RunChild(const std::vector<std::string>& argv, bool quiet) {
  std::vector<char*> pointers;
  for (const std::string& arg : argv) pointers.push_back(const_cast<char*>(arg.c_str()));
  pointers.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (quiet) {
      std::FILE* null = std::freopen("/dev/null", "w", stderr);
      (void)null;
    }
    execv(pointers[0], pointers.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status) == 127 ? -1 : WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// `python3 -m traind_client.fleet <command>` with the flags given on trainctl's command line, as given.
absl::Status RunFleet(CommandContext& context, const std::string& command) {
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  const std::string python = PythonInterpreter();
  if (RunChild({python, "-c", "import traind_client.fleet"}, /*quiet=*/true) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainctl fleet needs the Python client: ", python,
                     " cannot import traind_client.fleet (install python3-traind-client, or `pip install "
                     "./client/python`; $TRAIND_PYTHON chooses the interpreter)"));
  }
  std::vector<std::string> argv = {python, "-m", "traind_client.fleet", command};
  for (const FlagSpec& flag : context.spec().flags) {
    if (!context.flags().Has(flag.name)) continue;
    argv.push_back("--" + flag.name);
    if (!flag.value_name.empty()) argv.push_back(context.flags().String(flag.name));
  }
  if (context.json() && command == "status") argv.push_back("--json");
  for (const std::string& arg : context.positional()) argv.push_back(arg);
  std::fflush(stdout);
  const int code = RunChild(argv, /*quiet=*/false);
  if (code < 0) return absl::FailedPreconditionError(absl::StrCat("could not run ", python));
  context.set_success_exit_code(code);
  return absl::OkStatus();
}

}  // namespace

std::vector<CommandSpec> FleetCommands() {
  std::vector<CommandSpec> commands;
  commands.push_back(CommandSpec{
      "fleet run", "", "federated training across the daemons of a fleet file (traind_client.fleet)",
      "Each round sends the global parameters to the devices, trains each on its own data as a training job,\n"
      "collects the parameters and aggregates them (numpy, on this machine). A device that is down, fails or\n"
      "misses --fit-timeout is left out of that round and rejoins later; the round counts with at least\n"
      "--min-fit-clients successes. --state-dir checkpoints the run after every round: the same command resumes\n"
      "it. Needs the Python client (python3-traind-client). Exit: 0 done, 3 the run failed, 4 a local file.\n"
      "JSON: always, on stdout (progress goes to stderr): {\"rounds\": N, \"last\": the last round's global metrics}.\n"
      "fleet file (JSON; paths relative to it):\n"
      "  {\"devices\": [{\"name\": \"edge-1\", \"address\": \"10.0.0.1:50051\", \"tls_ca\": \"ca.pem\",\n"
      "                \"token_file\": \"edge.token\", \"data\": {\"local_path\": \"digits\"}, \"eval\": {\"fraction\": 0.2}}]}\n"
      "examples:\n"
      "  trainctl artifacts generate --model mlp.onnx --loss cross_entropy --optimizer adamw --lr 0.01 --out art\n"
      "  trainctl fleet run --fleet fleet.json --artifacts art --rounds 10 --state-dir run --history h.json --plot h.png\n",
      Flags({{{"fleet", "FILE", "the fleet file (required)"},
              {"artifacts", "DIR", "the four artifact files (not needed to resume from --state-dir)"},
              {"rounds", "N", "total rounds (required)"},
              {"state-dir", "DIR", "the manager's checkpointed run state; resumed when it holds a run"},
              {"strategy", "NAME", "fedavg (default), fedavgm, fedadam, fedmedian, fedtrimmedavg"},
              {"server-lr", "X", "server learning rate (fedavg 1, fedavgm 1, fedadam 0.03)"},
              {"momentum", "X", "fedavgm: server momentum (default 0.9)"},
              {"trim", "X", "fedtrimmedavg: fraction trimmed at each end (default 0.2)"},
              {"clip-norm", "X", "clip each device's update to this L2 norm"},
              {"local-epochs", "N", "epochs each device trains per round (default 1)"},
              {"batch-size", "N", "examples per local step (default 32)"},
              {"no-accuracy", "", "do not ask the devices for eval accuracy"},
              {"job-options", "JSON", "more JobSpec fields, e.g. '{\"label_input\": \"labels\"}'"},
              {"fit-timeout", "S", "seconds per device per round (default 600)"},
              {"min-fit-clients", "N", "successes a round needs to count (default 1)"},
              {"min-fit-fraction", "F", "... as a fraction of the sampled devices"},
              {"fraction-fit", "F", "share of the devices sampled each round (default 1)"},
              {"max-concurrency", "N", "devices worked on at once (default 32)"},
              {"trainable-only", "", "average the trainable parameters only"},
              {"seed", "N", "seed of sampling, shuffling and sessions (default 1)"},
              {"history", "FILE", "write the history as JSON"},
              {"plot", "FILE", "write loss and accuracy per round as PNG"}}}),
      0, 0, 0, [](CommandContext& context) {
        context.flags().Required("fleet");
        context.flags().Required("rounds");
        return RunFleet(context, "run");
      }});
  commands.push_back(CommandSpec{
      "fleet status", "", "every device of a fleet file: up or down, version, running jobs",
      "Asks each device (concurrently) for its server info and jobs. Exit 1 when a device is down.\n"
      "JSON: {\"devices\": [{\"name\", \"address\", \"ok\", \"version\", \"running_jobs\" | \"error\"}]}.\n",
      Flags({{{"fleet", "FILE", "the fleet file (required)"}}}), 0, 0, 0, [](CommandContext& context) {
        context.flags().Required("fleet");
        return RunFleet(context, "status");
      }});
  commands.push_back(CommandSpec{"fleet plot", "HISTORY OUT",
                                 "a run's history (JSON) as PNG: loss and accuracy per round",
                                 "JSON: always, on stdout: {\"plot\": OUT, \"rounds\": N}.\n", {}, 2, 2, 0,
                                 [](CommandContext& context) { return RunFleet(context, "plot"); }});
  return commands;
}

}  // namespace traind::cli
