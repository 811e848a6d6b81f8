// Training jobs: the daemon trains a session over a dataset on its own — epochs of shuffled mini-batches, an eval
// after each epoch (loss, accuracy), a schedule, early stopping, checkpoints — while clients only watch.
//
// Durability: a job's record (its spec and progress, traind/internal/state.proto JobRecord) is kept in
// <tenant dir>/jobs/<id>, written atomically at submission, after each epoch's eval and when the job ends. Its
// position in the data (epoch, next batch) travels in the session's checkpoint properties, set with each step
// (SessionManager::TrainStep's set_properties), so the checkpoint a step triggers always holds the position after
// it. The shuffle of epoch e is a pure function of (shuffle_seed, e). So a job interrupted by a restart — drain or
// kill -9 — resumes from its session's last checkpoint and ends with exactly the parameters of an uninterrupted
// run (for models without Dropout: a restarted session's Dropout masks continue from a fresh stream).
//
// The job manager uses the wire schema's Job / JobSpec messages as its data model (it persists and streams them);
// the engine still never sees them.
#ifndef TRAIND_SERVER_JOB_MANAGER_H_
#define TRAIND_SERVER_JOB_MANAGER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/session_manager.h"
#include "server/tenant_spaces.h"
#include "traind/v1/training_service.pb.h"

namespace traind {

struct JobLimits {
  int64_t max_concurrent_jobs = 4;  // jobs queued or running at once, all tenants together
  int64_t max_dataset_bytes = int64_t{4} << 30;
  // Directories whose files JobSpec's Dataset.local_path may name (relative to one of them).
  std::vector<std::string> data_dirs;
};

class JobManager {
 public:
  // Everything passed in must outlive the manager.
  JobManager(SessionManager* sessions, TenantSpaces* spaces, JobLimits limits);
  ~JobManager();  // Stop()
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Validates the spec and the dataset (loaded now, so that a bad one is refused at once), creates the job's
  // session for an artifact_id, and starts the job. RESOURCE_EXHAUSTED past max_concurrent_jobs or the tenant's
  // `tenant_max_jobs` (0: none).
  absl::StatusOr<v1::Job> Submit(const Caller& caller, int64_t tenant_max_jobs, const v1::JobSpec& spec);
  absl::StatusOr<v1::Job> Get(const Caller& caller, const std::string& job_id) const;
  std::vector<v1::Job> List(const Caller& caller) const;
  // The job stops between two steps; its session keeps what it learnt.
  absl::StatusOr<v1::Job> Cancel(const Caller& caller, const std::string& job_id);
  // The job once its version is past `after_version` (or at `deadline`, as it is), with its version.
  absl::StatusOr<std::pair<v1::Job, int64_t>> Wait(const Caller& caller, const std::string& job_id,
                                                   int64_t after_version, absl::Time deadline) const;

  // At start-up, after the sessions are restored: resumes every job that was queued or running.
  void RestoreAll();
  // Stops every runner between steps (on drain); the jobs stay RUNNING in their records and resume at the next
  // start. Idempotent.
  void Stop();

  static bool IsTerminal(v1::JobState state);
  // Jobs by (tenant, state), for the traind_jobs gauge.
  std::map<std::pair<std::string, v1::JobState>, int64_t> CountByState() const;

 private:
  struct Job;
  absl::StatusOr<std::shared_ptr<Job>> Find(const Caller& caller, const std::string& job_id) const;
  void Start(std::shared_ptr<Job> job);
  void Run(Job& job);
  absl::Status Train(Job& job);
  absl::Status Persist(const Job& job) const;
  void Publish(Job& job, const std::function<void(v1::Job&)>& update);

  SessionManager* sessions_;
  TenantSpaces* spaces_;
  const JobLimits limits_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace traind

#endif  // TRAIND_SERVER_JOB_MANAGER_H_
