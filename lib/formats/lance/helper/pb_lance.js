'use strict';
// pipebench's bridge to the Lance engine (@lancedb/lancedb, pinned in package-lock.json).
// lib/formats/lance/lance.c starts it; see docs/format-lance.md for the protocol.
//
//   node pb_lance.js version
//       prints "lancedb-node VERSION"
//   node pb_lance.js write STAGE LAYOUT
//       reads STAGE/head.json ({dtype, chunk: [z, y, x]}) and STAGE/meta.jsonl (one image's
//       meta per line, with its byte offset and length in STAGE/pixels.bin) and writes the Lance dataset STAGE/db/images.lance in LAYOUT
//       (chunks, planes: the OME-Arrow struct; bytes: id, shape, dtype, pixels)
//   node pb_lance.js serve DATASET SOCKET
//       opens DATASET (a folder, or s3://bucket/prefix/NAME.lance with the S3 settings in
//       PB_S3_* of the environment), connects to the Unix socket SOCKET and answers requests,
//       one at a time:
//         META\n                        -> JSON: layout, column, count, images[]
//         READ i\n                      -> image i's pixels, T,C,Z,Y,X C order, little-endian
//         TAKE MODE BATCH ORDER OUT\n   -> times takeOffsets over the int64 offsets in file
//                                          ORDER: MODE sample (one row per call) or batch
//                                          (BATCH rows per call); writes one int64 ns per call
//                                          to OUT; answers JSON {calls, rows, bytes}
//       Every answer is a 16-byte header ("OK" or "ER", 2 zero bytes, 4 reserved, an int64
//       payload length, all little-endian) and the payload (the error text for "ER").
//       The helper ends when the socket closes.

const fs = require('fs');
const os = require('os');
const path = require('path');
const net = require('net');

let lancedb = null;
let arrow = null;
function loadEngine() {
  // CommonJS on purpose: lancedb checks Arrow values with instanceof against the copy of
  // apache-arrow that require() gives, so the helper must use that same copy.
  lancedb = require('@lancedb/lancedb');
  arrow = require('apache-arrow');
}

function engineVersion() {
  let dir = path.dirname(require.resolve('@lancedb/lancedb'));
  for (let k = 0; k < 4; k++, dir = path.dirname(dir)) {
    const f = path.join(dir, 'package.json');
    if (fs.existsSync(f)) {
      const p = JSON.parse(fs.readFileSync(f, 'utf8'));
      if (p.name === '@lancedb/lancedb') return p.version;
    }
  }
  return 'unknown';
}

const DTYPES = {
  uint8: { size: 1, arrow: () => new arrow.Uint8(), ome: 'uint8' },
  uint16: { size: 2, arrow: () => new arrow.Uint16(), ome: 'uint16' },
  uint32: { size: 4, arrow: () => new arrow.Uint32(), ome: 'uint32' },
  int16: { size: 2, arrow: () => new arrow.Int16(), ome: 'int16' },
  float32: { size: 4, arrow: () => new arrow.Float32(), ome: 'float' },
  float64: { size: 8, arrow: () => new arrow.Float64(), ome: 'double' },
};
const TYPED = {
  uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array, int16: Int16Array,
  float32: Float32Array, float64: Float64Array,
};
function dtypeFromName(n) {
  if (n === 'float') return 'float32';
  if (n === 'double') return 'float64';
  if (n === 'uint16' || n === 'uint8' || n === 'uint32' || n === 'int16' || n === 'float32' ||
      n === 'float64') return n;
  return null;
}

class Fail extends Error {}

// ---- writing --------------------------------------------------------------------------------

const F = (name, type) => new arrow.Field(name, type, true);
const listOf = (type) => new arrow.List(F('item', type));

function channelType() {
  return new arrow.Struct([F('id', new arrow.Utf8()), F('name', new arrow.Utf8()),
    F('emission_um', new arrow.Float32()), F('excitation_um', new arrow.Float32()),
    F('illumination', new arrow.Utf8()), F('color_rgba', new arrow.Uint32())]);
}
function pixelsMetaType() {
  return new arrow.Struct([F('dimension_order', new arrow.Utf8()), F('type', new arrow.Utf8()),
    F('size_x', new arrow.Int32()), F('size_y', new arrow.Int32()), F('size_z', new arrow.Int32()),
    F('size_c', new arrow.Int16()), F('size_t', new arrow.Int32()),
    F('physical_size_x', new arrow.Float32()), F('physical_size_y', new arrow.Float32()),
    F('physical_size_z', new arrow.Float32()), F('physical_size_x_unit', new arrow.Utf8()),
    F('physical_size_y_unit', new arrow.Utf8()), F('physical_size_z_unit', new arrow.Utf8()),
    F('channels', listOf(channelType()))]);
}
function chunkGridType() {
  return new arrow.Struct([F('order', new arrow.Utf8()), F('chunk_t', new arrow.Int32()),
    F('chunk_c', new arrow.Int16()), F('chunk_z', new arrow.Int32()), F('chunk_y', new arrow.Int32()),
    F('chunk_x', new arrow.Int32()), F('chunk_order', new arrow.Utf8())]);
}
function chunkType(px) {
  return new arrow.Struct([F('t', new arrow.Int32()), F('c', new arrow.Int16()),
    F('z', new arrow.Int32()), F('y', new arrow.Int32()), F('x', new arrow.Int32()),
    F('shape_z', new arrow.Int32()), F('shape_y', new arrow.Int32()), F('shape_x', new arrow.Int32()),
    F('pixels', listOf(px))]);
}
function planeType(px) {
  return new arrow.Struct([F('z', new arrow.Int32()), F('t', new arrow.Int32()),
    F('c', new arrow.Int16()), F('pixels', listOf(px))]);
}
function omeType(px) {
  return new arrow.Struct([F('type', new arrow.Utf8()), F('version', new arrow.Utf8()),
    F('id', new arrow.Utf8()), F('name', new arrow.Utf8()), F('image_type', new arrow.Utf8()),
    F('acquisition_datetime', new arrow.TimestampMicrosecond()),
    F('pixels_meta', pixelsMetaType()), F('chunk_grid', chunkGridType()),
    F('chunks', listOf(chunkType(px))), F('planes', listOf(planeType(px))),
    F('masks', new arrow.Null())]);
}

const vec = (values, type) => arrow.vectorFromArray(values, type).data[0];
const prim = (Type, TA, values) => arrow.makeData({ type: new Type(), length: values.length,
  nullCount: 0, data: TA.from(values) });
function structData(type, length, children) {
  return arrow.makeData({ type, length, nullCount: 0, children });
}
function listData(type, offsets, child) {
  return arrow.makeData({ type, length: offsets.length - 1, nullCount: 0,
    valueOffsets: Int32Array.from(offsets), child });
}

// Pixels of one image's (t, c) box z0.., y0.., x0.. of shape sz, sy, sx, out of the image's
// TCZYX bytes, as a new typed array.
function cutBox(img, m, t, c, z0, y0, x0, sz, sy, sx) {
  const es = DTYPES[m.dtype].size;
  const [, C, Z, Y, X] = m.shape;
  const out = Buffer.alloc(sz * sy * sx * es);
  let o = 0;
  for (let z = 0; z < sz; z++)
    for (let y = 0; y < sy; y++) {
      const src = ((((t * C + c) * Z + z0 + z) * Y + y0 + y) * X + x0) * es;
      img.copy(out, o, src, src + sx * es);
      o += sx * es;
    }
  return out;
}

function typedOf(buf, dtype) {
  const TA = TYPED[dtype];
  // a fresh buffer is aligned; Buffer.alloc may pool small ones, so copy when it is not
  if (buf.byteOffset % TA.BYTES_PER_ELEMENT !== 0) buf = Buffer.from(buf);
  return new TA(buf.buffer, buf.byteOffset, buf.length / TA.BYTES_PER_ELEMENT);
}

function concatTyped(parts, dtype) {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new TYPED[dtype](n);
  let o = 0;
  for (const p of parts) { out.set(p, o); o += p.length; }
  return out;
}

function omeBatch(items, layout, grid, dtype) {
  const px = DTYPES[dtype].arrow();
  const type = omeType(px);
  const n = items.length;
  const ms = items.map((it) => it.meta);
  const str = (f) => vec(ms.map(f), new arrow.Utf8());
  const pm = structData(type.children[6].type, n, [
    str((m) => (m.shape[2] === 1 ? 'XYCT' : 'XYZCT')), str((m) => DTYPES[m.dtype].ome),
    prim(arrow.Int32, Int32Array, ms.map((m) => m.shape[4])),
    prim(arrow.Int32, Int32Array, ms.map((m) => m.shape[3])),
    prim(arrow.Int32, Int32Array, ms.map((m) => m.shape[2])),
    prim(arrow.Int16, Int16Array, ms.map((m) => m.shape[1])),
    prim(arrow.Int32, Int32Array, ms.map((m) => m.shape[0])),
    prim(arrow.Float32, Float32Array, ms.map((m) => m.physical_size[0])),
    prim(arrow.Float32, Float32Array, ms.map((m) => m.physical_size[1])),
    prim(arrow.Float32, Float32Array, ms.map((m) => m.physical_size[2])),
    str((m) => m.units[0]), str((m) => m.units[1]), str((m) => m.units[2]),
    vec(ms.map((m) => m.channels), type.children[6].type.children[13].type),
  ]);
  const cg = [[], [], [], [], [], [], []];
  const chunkCols = [[], [], [], [], [], [], [], []], chunkPx = [], chunkOff = [0], pxOff = [0];
  const planeCols = [[], [], []], planePx = [], planeOff = [0], planePxOff = [0];
  for (const it of items) {
    const m = it.meta;
    const [T, C, Z, Y, X] = m.shape;
    if (layout === 'planes') {
      for (let t = 0; t < T; t++)
        for (let c = 0; c < C; c++)
          for (let z = 0; z < Z; z++) {
            planeCols[0].push(z); planeCols[1].push(t); planeCols[2].push(c);
            const p = typedOf(cutBox(it.pixels, m, t, c, z, 0, 0, 1, Y, X), dtype);
            planePx.push(p);
            planePxOff.push(planePxOff[planePxOff.length - 1] + p.length);
          }
      planeOff.push(planeCols[0].length);
      cg.forEach((col) => col.push(null));
      chunkOff.push(chunkCols[0].length);
      continue;
    }
    const cs = [Math.min(grid[0], Z), Math.min(grid[1], Y), Math.min(grid[2], X)];
    const g = ['TCZYX', 1, 1, cs[0], cs[1], cs[2], 'ZYX'];
    g.forEach((v, k) => cg[k].push(v));
    for (let t = 0; t < T; t++)
      for (let c = 0; c < C; c++)
        for (let z = 0; z < Z; z += cs[0])
          for (let y = 0; y < Y; y += cs[1])
            for (let x = 0; x < X; x += cs[2]) {
              const sz = Math.min(cs[0], Z - z), sy = Math.min(cs[1], Y - y), sx = Math.min(cs[2], X - x);
              [t, c, z, y, x, sz, sy, sx].forEach((v, k) => chunkCols[k].push(v));
              const p = typedOf(cutBox(it.pixels, m, t, c, z, y, x, sz, sy, sx), dtype);
              chunkPx.push(p);
              pxOff.push(pxOff[pxOff.length - 1] + p.length);
            }
    chunkOff.push(chunkCols[0].length);
    planeOff.push(planeCols[0].length);
  }
  const i32 = (v) => prim(arrow.Int32, Int32Array, v);
  const i16 = (v) => prim(arrow.Int16, Int16Array, v);
  const gridT = type.children[7].type;
  const gridData = arrow.makeData({ type: gridT, length: n, nullCount: layout === 'planes' ? n : 0,
    nullBitmap: layout === 'planes' ? new Uint8Array(Math.ceil(n / 8)) : undefined,
    children: [vec(cg[0], new arrow.Utf8()), vec(cg[1], new arrow.Int32()), vec(cg[2], new arrow.Int16()),
      vec(cg[3], new arrow.Int32()), vec(cg[4], new arrow.Int32()), vec(cg[5], new arrow.Int32()),
      vec(cg[6], new arrow.Utf8())] });
  const chunkT = type.children[8].type.children[0].type;
  const pxList = (parts, offs) => listData(listOf(px), offs, arrow.makeData({ type: px,
    length: offs[offs.length - 1], nullCount: 0, data: concatTyped(parts, dtype) }));
  const chunks = listData(type.children[8].type, chunkOff, structData(chunkT, chunkCols[0].length, [
    i32(chunkCols[0]), i16(chunkCols[1]), i32(chunkCols[2]), i32(chunkCols[3]), i32(chunkCols[4]),
    i32(chunkCols[5]), i32(chunkCols[6]), i32(chunkCols[7]), pxList(chunkPx, pxOff)]));
  const planeT = type.children[9].type.children[0].type;
  const planes = listData(type.children[9].type, planeOff, structData(planeT, planeCols[0].length, [
    i32(planeCols[0]), i32(planeCols[1]), i16(planeCols[2]), pxList(planePx, planePxOff)]));
  const ome = structData(type, n, [
    str(() => 'ome.arrow'), str(() => 'pipebench-0.1.0'), str((m) => m.id), str((m) => m.name),
    str(() => 'image'), vec(ms.map(() => null), new arrow.TimestampMicrosecond()), pm, gridData,
    chunks, planes, arrow.makeData({ type: new arrow.Null(), length: n })]);
  const schema = new arrow.Schema([F('ome_arrow', type)]);
  return new arrow.RecordBatch(schema, structData(new arrow.Struct(schema.fields), n, [ome]));
}

function bytesBatch(items) {
  const n = items.length;
  const schema = new arrow.Schema([F('id', new arrow.Utf8()), F('shape', listOf(new arrow.Int64())),
    F('dtype', new arrow.Utf8()), F('pixels', new arrow.Binary())]);
  const shapeOff = [0];
  const dims = [];
  for (const it of items) { dims.push(...it.meta.shape.map(BigInt)); shapeOff.push(dims.length); }
  const shapes = listData(schema.fields[1].type, shapeOff, arrow.makeData({ type: new arrow.Int64(),
    length: dims.length, nullCount: 0, data: BigInt64Array.from(dims) }));
  let total = 0;
  const off = new Int32Array(n + 1);
  items.forEach((it, k) => { total += it.pixels.length; off[k + 1] = total; });
  const values = Buffer.concat(items.map((it) => it.pixels), total);
  const pixels = arrow.makeData({ type: new arrow.Binary(), length: n, nullCount: 0,
    valueOffsets: off, data: new Uint8Array(values.buffer, values.byteOffset, values.length) });
  return new arrow.RecordBatch(schema, structData(new arrow.Struct(schema.fields), n, [
    vec(items.map((it) => it.meta.id || it.meta.name), new arrow.Utf8()), shapes,
    vec(items.map((it) => it.meta.dtype), new arrow.Utf8()), pixels]));
}

async function cmdWrite(stage, layout) {
  if (!['chunks', 'planes', 'bytes'].includes(layout)) throw new Fail(`unknown layout '${layout}'`);
  const head = JSON.parse(fs.readFileSync(path.join(stage, 'head.json'), 'utf8'));
  const lines = fs.readFileSync(path.join(stage, 'meta.jsonl'), 'utf8').split('\n').filter(Boolean);
  const metas = lines.map((l) => JSON.parse(l));
  const fd = fs.openSync(path.join(stage, 'pixels.bin'), 'r');
  const db = await lancedb.connect(path.join(stage, 'db'));
  let table = null;
  // Rows go in batches of at most ~64 MiB of pixels (list offsets are 32-bit).
  const limit = 64 << 20;
  let batch = [], bytes = 0;
  const flush = async () => {
    if (batch.length === 0) return;
    const rb = layout === 'bytes' ? bytesBatch(batch) : omeBatch(batch, layout, head.chunk, head.dtype);
    const t = new arrow.Table([rb]);
    if (table === null) table = await db.createTable('images', t);
    else await table.add(t);
    batch = [];
    bytes = 0;
  };
  for (const m of metas) {
    if (layout !== 'bytes' && m.dtype !== head.dtype) {
      throw new Fail(`image '${m.name}' is ${m.dtype} but the ${layout} layout's pixel lists are ` +
        `${head.dtype} (one type per column); use layout=bytes for mixed types`);
    }
    const buf = Buffer.alloc(m.length);
    if (fs.readSync(fd, buf, 0, m.length, m.offset) !== m.length) throw new Fail('pixels.bin is short');
    if (bytes + m.length > limit) await flush();
    batch.push({ meta: m, pixels: buf });
    bytes += m.length;
  }
  await flush();
  if (table === null) {
    // no images: an empty table of the layout's schema
    const rb = layout === 'bytes' ? bytesBatch([]) : omeBatch([], layout, head.chunk, head.dtype);
    await db.createTable('images', new arrow.Table([rb]));
  }
  fs.closeSync(fd);
}

// ---- reading --------------------------------------------------------------------------------

// s3://: the storage options for lancedb's object store, from the S3 settings pipebench
// resolved (lib/io/s3.c) and put in this process's environment (PB_S3_*): the same endpoint,
// region and keys as pipebench's own s3:// reads; none: unsigned (anonymous) requests.
function s3Options() {
  const e = process.env;
  const o = { region: e.PB_S3_REGION || 'us-east-1' };
  if (e.PB_S3_ENDPOINT) {
    o.endpoint = e.PB_S3_ENDPOINT; // addressed path-style, as pipebench's reads are
    o.virtual_hosted_style_request = 'false';
    if (/^http:/i.test(e.PB_S3_ENDPOINT)) o.allow_http = 'true';
  }
  if (e.PB_S3_KEY_ID) {
    o.access_key_id = e.PB_S3_KEY_ID;
    o.secret_access_key = e.PB_S3_SECRET || '';
    if (e.PB_S3_TOKEN) o.session_token = e.PB_S3_TOKEN;
  } else {
    o.skip_signature = 'true';
  }
  // --timeout S and --retries N (set only when given): each request's limit, connecting
  // included, and the retries after a failed one, within a total that leaves room for them
  const t = parseFloat(e.PB_S3_TIMEOUT_S || '');
  const r = parseInt(e.PB_S3_RETRIES || '', 10);
  if (t > 0) {
    const ms = `${Math.max(1, Math.round(t * 1000))}ms`;
    o.timeout = ms;
    o.connect_timeout = ms;
    o.client_retry_timeout = String(Math.ceil(t * ((r >= 0 ? r : 10) + 1)));
  }
  if (r >= 0) o.client_max_retries = String(r);
  return o;
}

// s3://bucket/prefix/NAME.lance: lancedb opens a table by name inside a database URI, the
// table's folder being NAME.lance; a link cannot stand in for it in a bucket, so the name
// must end in .lance (as gen and convert name Lance datasets).
async function openS3(uri) {
  const u = uri.replace(/\/+$/, '');
  const cut = u.lastIndexOf('/');
  const base = u.slice(cut + 1);
  if (cut < 5 || !/^s3:\/\/[^/]+\/./.test(u) || !base.endsWith('.lance') || base === '.lance')
    throw new Fail('over s3:// the engine opens a dataset only at a name ending in .lance ' +
      '(s3://bucket/prefix/NAME.lance)');
  // Left to its defaults, lancedb's directory namespace creates a __manifest dataset beside
  // the table on connect: a reader must write nothing into the user's bucket.
  const db = await lancedb.connect(u.slice(0, cut), { storageOptions: s3Options(),
    manifestEnabled: false,
    namespaceClientProperties: { manifest_enabled: 'false', dir_listing_enabled: 'true' } });
  try {
    return await db.openTable(base.slice(0, -'.lance'.length));
  } catch (e) {
    if (/was not found/.test(String(e && e.message)))
      throw new Fail(`cannot open it: no Lance dataset there (${engineMessage(e)})`);
    throw e;
  }
}

let linkDir = null;
async function openDataset(p) {
  if (/^s3:\/\//i.test(p)) return openS3(p);
  const abs = path.resolve(p);
  dsAbs = abs;
  // lancedb opens tables by name inside a database folder. A private folder holding one link
  // to the dataset makes any dataset folder a table, and keeps lancedb from writing anything
  // next to the user's data.
  linkDir = fs.mkdtempSync(path.join(os.tmpdir(), 'pb-lance-'));
  fs.symlinkSync(abs, path.join(linkDir, 'ds.lance'));
  const db = await lancedb.connect(linkDir);
  return db.openTable('ds');
}
function cleanup() {
  if (linkDir !== null) {
    try { fs.rmSync(linkDir, { recursive: true, force: true }); } catch (e) { /* best effort */ }
    linkDir = null;
  }
}

// The engine's message in the user's terms: the dataset's own path instead of the private
// link to it, without the Rust source locations and the repeated causes.
let dsAbs = null;
function engineMessage(e) {
  let m = String(e && e.message ? e.message : e).split(/\s*Caused by:/)[0];
  m = m.replace(/,?\s*\/\S*cargo\/registry\/\S+:\d+:\d+/g, '');
  // an object store's refusal: its status line, without the server's XML body
  m = m.replace(/(non-2xx status code: \d+[A-Za-z ]*):\s*<\?xml[\s\S]*$/, '$1');
  if (linkDir !== null && dsAbs !== null) {
    const link = path.join(linkDir, 'ds.lance');
    m = m.split(link).join(dsAbs).split(link.slice(1)).join(dsAbs);
  }
  return `lancedb: ${m.trim()}`;
}

function findLayout(schema) {
  let col = null;
  for (const f of schema.fields) {
    if (f.type instanceof arrow.Struct && f.type.children.some((c) => c.name === 'pixels_meta')) {
      if (col === null || f.name === 'ome_arrow') col = f;
    }
  }
  if (col !== null) return { layout: 'ome-arrow', column: col.name, type: col.type };
  const names = schema.fields.map((f) => f.name);
  if (['shape', 'dtype', 'pixels'].every((n) => names.includes(n))) return { layout: 'bytes', column: 'pixels' };
  throw new Fail('no OME-Arrow struct column (one with pixels_meta) and no byte layout ' +
    `(shape, dtype, pixels); columns: ${names.join(', ')}`);
}

function shape5(list, where) {
  const s = Array.from(list, Number);
  if (s.length < 1 || s.length > 5 || s.some((v) => !Number.isSafeInteger(v) || v < 1))
    throw new Fail(`${where}: shape [${s.join(', ')}] is not 1 to 5 positive sizes`);
  while (s.length < 5) s.unshift(1);
  return s;
}

async function describe(table, lay) {
  const images = [];
  if (lay.layout === 'bytes') {
    const names = (await table.schema()).fields.map((f) => f.name);
    const cols = ['shape', 'dtype'].concat(names.includes('id') ? ['id'] : []);
    const r = await table.query().select(cols).toArrow();
    for (let i = 0; i < r.numRows; i++) {
      const dtype = dtypeFromName(String(r.getChild('dtype').get(i)));
      if (dtype === null) throw new Fail(`row ${i}: unknown dtype '${r.getChild('dtype').get(i)}'`);
      const id = names.includes('id') ? String(r.getChild('id').get(i) ?? '') : '';
      images.push({ name: id || `row_${i}`, id, dtype, shape: shape5(r.getChild('shape').get(i), `row ${i}`) });
    }
    return images;
  }
  // Only the struct's fields that exist are asked for (the engine refuses a projection of a
  // missing field): id, name and everything in pixels_meta but the pixel type and the sizes
  // are optional, as in the Parquet readers.
  const c = lay.column;
  const has = (type, name) => type.children.some((f) => f.name === name);
  const omeT = lay.type;
  const pmT = omeT.children.find((f) => f.name === 'pixels_meta').type;
  if (!(pmT instanceof arrow.Struct)) throw new Fail(`${c}.pixels_meta is not a struct`);
  const missing = ['type', 'size_x', 'size_y', 'size_z', 'size_c', 'size_t'].filter((n) => !has(pmT, n));
  if (missing.length > 0)
    throw new Fail(`${c}.pixels_meta has no ${missing.join(', ')} (needed for the pixels)`);
  if (!has(omeT, 'planes') && !has(omeT, 'chunks'))
    throw new Fail(`${c} has neither planes nor chunks: no pixels`);
  const optional = ['id', 'name'].filter((n) => has(omeT, n));
  const r = await table.query().select(optional.map((n) => `${c}.${n}`).concat([`${c}.pixels_meta`])).toArrow();
  const none = { get: () => null };
  const ids = has(omeT, 'id') ? r.getChildAt(optional.indexOf('id')) : none;
  const nms = has(omeT, 'name') ? r.getChildAt(optional.indexOf('name')) : none;
  const pms = r.getChildAt(optional.length);
  for (let i = 0; i < r.numRows; i++) {
    const pm = pms.get(i);
    if (pm === null) throw new Fail(`row ${i}: pixels_meta is null`);
    const dtype = dtypeFromName(String(pm.type));
    if (dtype === null) throw new Fail(`row ${i}: unknown pixel type '${pm.type}'`);
    const shape = shape5([pm.size_t, pm.size_c, pm.size_z, pm.size_y, pm.size_x], `row ${i}`);
    const ch = pm.channels ? Array.from(pm.channels, (x) => ({
      id: x.id ?? '', name: x.name ?? '', emission_um: x.emission_um ?? 0,
      excitation_um: x.excitation_um ?? 0, illumination: x.illumination ?? '',
      color_rgba: x.color_rgba ?? 0 })) : [];
    images.push({ name: String(nms.get(i) ?? ids.get(i) ?? `row_${i}`), id: String(ids.get(i) ?? ''),
      dtype, shape,
      physical_size: [pm.physical_size_x ?? 0, pm.physical_size_y ?? 0, pm.physical_size_z ?? 0],
      units: [pm.physical_size_x_unit ?? '', pm.physical_size_y_unit ?? '', pm.physical_size_z_unit ?? ''],
      channels: ch });
  }
  return images;
}

function bytesOfVector(v) {
  const a = v.toArray();
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

// Image i's TCZYX pixels out of one row of a take.
function pixelsOf(r, k, lay, m, i) {
  const es = DTYPES[m.dtype].size;
  const [T, C, Z, Y, X] = m.shape;
  const size = T * C * Z * Y * X * es;
  if (lay.layout === 'bytes') {
    const v = r.getChild('pixels').get(k);
    if (v === null || v.length !== size)
      throw new Fail(`row ${i}: pixels hold ${v === null ? 0 : v.length} bytes, shape and dtype say ${size}`);
    return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  }
  const row = r.getChild(lay.column).get(k);
  const out = Buffer.alloc(size);
  const chunks = row.chunks ? Array.from(row.chunks) : [];
  if (chunks.length > 0) {
    let covered = 0;
    for (const ch of chunks) {
      const [t, c, z0, y0, x0] = [ch.t, ch.c, ch.z, ch.y, ch.x];
      const [sz, sy, sx] = [ch.shape_z, ch.shape_y, ch.shape_x];
      if (t < 0 || t >= T || c < 0 || c >= C || z0 < 0 || y0 < 0 || x0 < 0 || sz < 1 || sy < 1 ||
          sx < 1 || z0 + sz > Z || y0 + sy > Y || x0 + sx > X)
        throw new Fail(`row ${i}: chunk at t=${t} c=${c} z=${z0} y=${y0} x=${x0} of shape ` +
          `${sz}x${sy}x${sx} lies outside the image`);
      if (ch.pixels === null) throw new Fail(`row ${i}: a chunk without pixels (byte chunks are not read)`);
      const src = bytesOfVector(ch.pixels);
      if (src.length !== sz * sy * sx * es)
        throw new Fail(`row ${i}: a chunk of ${sz}x${sy}x${sx} holds ${src.length / es} pixels`);
      let o = 0;
      for (let z = 0; z < sz; z++)
        for (let y = 0; y < sy; y++) {
          const d = ((((t * C + c) * Z + z0 + z) * Y + y0 + y) * X + x0) * es;
          src.copy(out, d, o, o + sx * es);
          o += sx * es;
        }
      covered += src.length;
    }
    if (covered !== size) throw new Fail(`row ${i}: the chunks cover ${covered / es} of ${size / es} pixels`);
    return out;
  }
  const planes = row.planes ? Array.from(row.planes) : [];
  if (planes.length !== T * C * Z) throw new Fail(`row ${i}: ${planes.length} planes, the image has ${T * C * Z}`);
  for (const p of planes) {
    if (p.t < 0 || p.t >= T || p.c < 0 || p.c >= C || p.z < 0 || p.z >= Z)
      throw new Fail(`row ${i}: plane t=${p.t} c=${p.c} z=${p.z} lies outside the image`);
    const src = bytesOfVector(p.pixels);
    if (src.length !== Y * X * es) throw new Fail(`row ${i}: a plane holds ${src.length / es} pixels, not ${Y * X}`);
    src.copy(out, (((p.t * C + p.c) * Z + p.z) * Y * X) * es);
  }
  return out;
}

function header(ok, len) {
  const h = Buffer.alloc(16);
  h.write(ok ? 'OK' : 'ER', 0, 'latin1');
  h.writeBigInt64LE(BigInt(len), 8);
  return h;
}

async function cmdServe(dsPath, sockPath) {
  let table = null, lay = null, images = null, openError = null;
  try {
    table = await openDataset(dsPath);
    lay = findLayout(await table.schema());
    images = await describe(table, lay);
  } catch (e) {
    openError = e instanceof Fail ? e.message : `cannot open it: ${engineMessage(e)}`;
  }
  const sock = net.createConnection(sockPath);
  let pending = Buffer.alloc(0);
  let busy = false;
  const reply = (ok, payload) => {
    sock.write(header(ok, payload.length));
    sock.write(payload);
  };
  const handle = async (line) => {
    const w = line.split(' ');
    if (openError !== null) throw new Fail(openError);
    if (w[0] === 'META') {
      return Buffer.from(JSON.stringify({ layout: lay.layout, column: lay.column,
        count: images.length, images }));
    }
    if (w[0] === 'READ') {
      const i = Number(w[1]);
      if (!Number.isSafeInteger(i) || i < 0 || i >= images.length) throw new Fail(`no image ${w[1]}`);
      const r = await table.takeOffsets([i]).toArrow();
      if (r.numRows !== 1) throw new Fail(`row ${i}: the engine gave ${r.numRows} rows`);
      return pixelsOf(r, 0, lay, images[i], i);
    }
    if (w[0] === 'TAKE') {
      const mode = w[1], bs = Number(w[2]);
      const ob = fs.readFileSync(w[3]);
      const order = new BigInt64Array(ob.buffer, ob.byteOffset, ob.length / 8);
      const offs = Array.from(order, Number);
      for (const o of offs) if (!(o >= 0 && o < images.length)) throw new Fail(`no image ${o}`);
      const per = mode === 'sample' ? 1 : bs;
      if (!(per >= 1)) throw new Fail(`bad batch size ${w[2]}`);
      const calls = Math.ceil(offs.length / per);
      const times = new BigInt64Array(calls);
      let rows = 0, bytes = 0;
      const col = lay.layout === 'bytes' ? 'pixels' : lay.column;
      for (let k = 0; k < calls; k++) {
        // takeOffsets gives each row once, in offset order: a batch that spans two epochs
        // may name a row twice, and gets it once
        const part = offs.slice(k * per, (k + 1) * per);
        const uniq = per === 1 ? part : [...new Set(part)];
        const t0 = process.hrtime.bigint();
        const r = await table.takeOffsets(uniq).toArrow();
        const t1 = process.hrtime.bigint();
        times[k] = t1 - t0;
        if (r.numRows !== uniq.length) throw new Fail(`the engine gave ${r.numRows} rows for ${uniq.length} offsets`);
        rows += part.length;
        for (const d of r.getChild(col).data) bytes += d.byteLength;
      }
      fs.writeFileSync(w[4], Buffer.from(times.buffer));
      return Buffer.from(JSON.stringify({ calls, rows, bytes }));
    }
    throw new Fail(`unknown request '${w[0]}'`);
  };
  const pump = async () => {
    if (busy) return;
    busy = true;
    for (;;) {
      const nl = pending.indexOf(10);
      if (nl < 0) break;
      const line = pending.subarray(0, nl).toString('utf8');
      pending = pending.subarray(nl + 1);
      try {
        reply(true, await handle(line));
      } catch (e) {
        reply(false, Buffer.from(e instanceof Fail ? e.message : engineMessage(e)));
      }
    }
    busy = false;
  };
  sock.on('data', (d) => { pending = Buffer.concat([pending, d]); pump(); });
  sock.on('error', () => { cleanup(); process.exit(3); });
  sock.on('close', () => { cleanup(); process.exit(0); });
}

async function main(argv) {
  const cmd = argv[0];
  loadEngine();
  if (cmd === 'version' && argv.length === 1) {
    process.stdout.write(`lancedb-node ${engineVersion()}\n`);
    return;
  }
  if (cmd === 'write' && argv.length === 3) return cmdWrite(argv[1], argv[2]);
  if (cmd === 'serve' && argv.length === 3) return cmdServe(argv[1], argv[2]);
  throw new Fail('usage: pb_lance.js version | write STAGE LAYOUT | serve DATASET SOCKET');
}

main(process.argv.slice(2)).catch((e) => {
  cleanup();
  process.stderr.write(`pb_lance: ${e instanceof Fail ? e.message : engineMessage(e)}\n`);
  process.exit(2);
});
