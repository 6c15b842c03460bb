/* pb_struct_layout: sizeof and offsetof of every public struct a binding copies by hand. A new
 * field in one of these structs is one F(...) line here, or the binding's import check fails. */
#include <string.h>

#include "pipebench/engine.h"
#include "pipebench/format.h"
#include "pipebench/infer.h"
#include "pipebench/layout.h"
#include "pipebench/loader.h"

#define F(type, field) {#field, offsetof(type, field), sizeof(((type *)0)->field)}

static const pb_field_layout error_fields[] = {F(struct pb_error, message)};

static const pb_field_layout channel_fields[] = {
    F(pb_channel, id),           F(pb_channel, name),         F(pb_channel, emission_um),
    F(pb_channel, excitation_um), F(pb_channel, illumination), F(pb_channel, color_rgba)};

static const pb_field_layout image_meta_fields[] = {
    F(pb_image_meta, name),          F(pb_image_meta, id),
    F(pb_image_meta, dtype),         F(pb_image_meta, shape),
    F(pb_image_meta, physical_size), F(pb_image_meta, physical_unit),
    F(pb_image_meta, n_channels),    F(pb_image_meta, channels)};

static const pb_field_layout loader_params_fields[] = {
    F(pb_loader_params, format),      F(pb_loader_params, batch_size),
    F(pb_loader_params, workers),     F(pb_loader_params, prefetch),
    F(pb_loader_params, shuffle),     F(pb_loader_params, seed),
    F(pb_loader_params, drop_last),   F(pb_loader_params, rank),
    F(pb_loader_params, world_size),  F(pb_loader_params, transform),
    F(pb_loader_params, mean),        F(pb_loader_params, std),
    F(pb_loader_params, out_dtype),   F(pb_loader_params, cache),
    F(pb_loader_params, cache_path),  F(pb_loader_params, skip_errors),
    F(pb_loader_params, allocator),   F(pb_loader_params, shard_pad),
    F(pb_loader_params, crop_h),      F(pb_loader_params, crop_w),
    F(pb_loader_params, resize),      F(pb_loader_params, scale_min),
    F(pb_loader_params, scale_max),   F(pb_loader_params, ratio_min),
    F(pb_loader_params, ratio_max),   F(pb_loader_params, flip),
    F(pb_loader_params, reduced_decode), F(pb_loader_params, reads_in_flight),
    F(pb_loader_params, bytes_in_flight)};

static const pb_field_layout batch_times_fields[] = {
    F(pb_batch_times, read_ns),      F(pb_batch_times, decompress_ns),
    F(pb_batch_times, decode_ns),    F(pb_batch_times, convert_ns),
    F(pb_batch_times, transform_ns), F(pb_batch_times, collate_ns),
    F(pb_batch_times, wait_ns),      F(pb_batch_times, bytes_read),
    F(pb_batch_times, bytes_decoded)};

static const pb_field_layout batch_fields[] = {
    F(pb_batch, data),    F(pb_batch, nbytes),  F(pb_batch, dtype),        F(pb_batch, ndim),
    F(pb_batch, shape),   F(pb_batch, indices), F(pb_batch, number),       F(pb_batch, epoch),
    F(pb_batch, skipped), F(pb_batch, times),   F(pb_batch, native_dtype), F(pb_batch, labels)};

static const pb_field_layout loader_stats_fields[] = {
    F(pb_loader_stats, batches),    F(pb_loader_stats, samples),
    F(pb_loader_stats, skipped),    F(pb_loader_stats, times),
    F(pb_loader_stats, preload_ns), F(pb_loader_stats, preload_bytes),
    F(pb_loader_stats, dataset_count)};

static const pb_field_layout infer_params_fields[] = {
    F(pb_infer_params, frameworks),     F(pb_infer_params, model),
    F(pb_infer_params, dtype),          F(pb_infer_params, device),
    F(pb_infer_params, batch_sizes),    F(pb_infer_params, n_batch_sizes),
    F(pb_infer_params, iterations),     F(pb_infer_params, warmup),
    F(pb_infer_params, threads),        F(pb_infer_params, seed),
    F(pb_infer_params, data_source),    F(pb_infer_params, output_dir),
    F(pb_infer_params, plot),           F(pb_infer_params, python),
    F(pb_infer_params, peer_timeout_s), F(pb_infer_params, note),
    F(pb_infer_params, note_ctx),       F(pb_infer_params, progress),
    F(pb_infer_params, progress_ctx),   F(pb_infer_params, data_format),
    F(pb_infer_params, cancel)};

static const pb_field_layout train_params_fields[] = {
    F(pb_train_params, data),         F(pb_train_params, num_images),
    F(pb_train_params, model),        F(pb_train_params, loss),
    F(pb_train_params, dtype),        F(pb_train_params, device),
    F(pb_train_params, epochs),       F(pb_train_params, batch_size),
    F(pb_train_params, lr),           F(pb_train_params, threads),
    F(pb_train_params, workers),      F(pb_train_params, seed),
    F(pb_train_params, metrics_path), F(pb_train_params, note),
    F(pb_train_params, note_ctx),     F(pb_train_params, progress),
    F(pb_train_params, progress_ctx), F(pb_train_params, reads_in_flight),
    F(pb_train_params, bytes_in_flight)};

static const pb_field_layout train_result_fields[] = {
    F(pb_train_result, backend),          F(pb_train_result, device),
    F(pb_train_result, device_name),      F(pb_train_result, isa),
    F(pb_train_result, threads),          F(pb_train_result, parameters),
    F(pb_train_result, images),           F(pb_train_result, channels),
    F(pb_train_result, height),           F(pb_train_result, width),
    F(pb_train_result, steps),            F(pb_train_result, total_s),
    F(pb_train_result, first_epoch_s),    F(pb_train_result, first_batch_data_s),
    F(pb_train_result, first_batch_compute_s), F(pb_train_result, data_s),
    F(pb_train_result, compute_s),        F(pb_train_result, data_wait_fraction),
    F(pb_train_result, throughput_ips),   F(pb_train_result, first_loss),
    F(pb_train_result, final_loss),       F(pb_train_result, peak_rss_mb),
    F(pb_train_result, engine_memory_mb), F(pb_train_result, gflops_per_image_forward)};

static const pb_field_layout engine_params_fields[] = {
    F(pb_engine_params, model),      F(pb_engine_params, device),   F(pb_engine_params, backend),
    F(pb_engine_params, dtype),      F(pb_engine_params, batch_size),
    F(pb_engine_params, channels),   F(pb_engine_params, height),   F(pb_engine_params, width),
    F(pb_engine_params, seed),       F(pb_engine_params, threads),
    F(pb_engine_params, training),   F(pb_engine_params, loss),
    F(pb_engine_params, momentum),   F(pb_engine_params, weight_decay)};

static const pb_field_layout native_batch_fields[] = {
    F(pb_native_batch, pixels), F(pb_native_batch, dtype), F(pb_native_batch, n),
    F(pb_native_batch, c),      F(pb_native_batch, z),     F(pb_native_batch, h),
    F(pb_native_batch, w),      F(pb_native_batch, mean),  F(pb_native_batch, std),
    F(pb_native_batch, channel_mean), F(pb_native_batch, channel_std)};

#define S(cname, type, fields) {cname, sizeof(type), fields, sizeof fields / sizeof fields[0]}

static const struct {
  const char *name;
  size_t size;
  const pb_field_layout *fields;
  size_t n;
} structs[] = {
    S("pb_error", struct pb_error, error_fields),
    S("pb_channel", pb_channel, channel_fields),
    S("pb_image_meta", pb_image_meta, image_meta_fields),
    S("pb_loader_params", pb_loader_params, loader_params_fields),
    S("pb_batch_times", pb_batch_times, batch_times_fields),
    S("pb_batch", pb_batch, batch_fields),
    S("pb_loader_stats", pb_loader_stats, loader_stats_fields),
    S("pb_infer_params", pb_infer_params, infer_params_fields),
    S("pb_train_params", pb_train_params, train_params_fields),
    S("pb_train_result", pb_train_result, train_result_fields),
    S("pb_engine_params", pb_engine_params, engine_params_fields),
    S("pb_native_batch", pb_native_batch, native_batch_fields),
};

size_t pb_struct_layout(const char *name, const pb_field_layout **fields, size_t *n_fields) {
  for (size_t i = 0; name != NULL && i < sizeof structs / sizeof structs[0]; i++) {
    if (strcmp(structs[i].name, name) != 0) continue;
    if (fields != NULL) *fields = structs[i].fields;
    if (n_fields != NULL) *n_fields = structs[i].n;
    return structs[i].size;
  }
  if (fields != NULL) *fields = NULL;
  if (n_fields != NULL) *n_fields = 0;
  return 0;
}

const char *pb_struct_layout_name(size_t i) {
  return i < sizeof structs / sizeof structs[0] ? structs[i].name : NULL;
}
