// src/train/run_directory.h (internal): the Trainer's output directory and the names of the files a run
// writes there (trainer.h, "Output directory" and "Files in out_dir"). Kept apart from the loop so that
// the rules on whose files may be replaced live in one place, next to the names they recognise.
#pragma once

#include <cstdint>
#include <string>

#include "mixtrain/io/file.h"

namespace mixtrain::train::detail {

// "<dir>/checkpoint-<step>.safetensors": the periodic checkpoint of `step`.
std::string periodic_checkpoint_path(const std::string& dir, int64_t step);

// The step of "checkpoint-<step>.safetensors", or -1 for any other file name.
int64_t periodic_checkpoint_step(const std::string& file_name);

// Where rank `rank` of `world` writes its shard of a ZeRO-1 checkpoint's optimizer state:
// "<dir>/checkpoint-40.zero-1-of-2.safetensors" beside "<dir>/checkpoint-40.safetensors". Shards are
// written first and the checkpoint file last, so a checkpoint whose file exists has all its shards.
std::string zero_shard_path(const std::string& checkpoint_path, int rank, int world);

// Keeps the lines of the metrics file whose "step" is <= `step` (what a run resumed from a
// checkpoint at `step` has already logged; later lines belong to the interrupted continuation and
// would be logged twice), rewriting it atomically, and returns it opened for appending.
io::AppendFile truncate_metrics(const std::string& path, int64_t step);

// Creates `out_dir` and readies it for a run: removes the temporary files a killed process left, then
//  - when the run resumed from a checkpoint that lies in `out_dir` (`resumed_from`, at `resumed_step`):
//    removes the periodic checkpoints past that step, and their shards (the abandoned continuation
//    wrote them);
//  - else, when `out_dir` holds files: refuses (mt::Error naming some of them) unless `overwrite`, which
//    removes the run files and leaves other files alone.
void prepare_out_dir(const std::string& out_dir, bool overwrite, const std::string& resumed_from, int64_t resumed_step);

// Removes the ZeRO-1 shards of `checkpoint_path` that a write by another number of processes left
// (all of them when `world` is 0: the checkpoint is no longer sharded). Called once the checkpoint
// file is written, so that a re-sharded run leaves no shards that belong to no checkpoint.
void remove_stale_shards(const std::string& checkpoint_path, int world);

// Removes all but the newest `keep` checkpoint-<step> files of `dir`, with their ZeRO-1 shards.
void remove_old_checkpoints(const std::string& dir, int64_t keep);

}  // namespace mixtrain::train::detail
