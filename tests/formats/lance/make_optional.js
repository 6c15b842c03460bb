'use strict';
// Writes a Lance table (DB/images.lance) the way another lancedb program might: an OME-Arrow
// struct column ome_image with only type, name, pixels_meta (type and sizes) and planes or
// chunks; no id, version, image_type, chunk_grid or masks. Three 4x3 uint8 images, pixel k of
// image i = (40 i + k) & 255. LAYOUT: planes, chunks, or nosize (pixels_meta lacks size_x).
//   node make_optional.js DB LAYOUT
const lancedb = require('@lancedb/lancedb');
const arrow = require('apache-arrow');

const F = (n, t) => new arrow.Field(n, t, true);
const listOf = (t) => new arrow.List(F('item', t));

async function main() {
  const [db, layout] = process.argv.slice(2);
  const sizes = layout === 'nosize' ? ['size_y'] : ['size_x', 'size_y'];
  const pmT = new arrow.Struct([F('type', new arrow.Utf8())].concat(
    sizes.map((n) => F(n, new arrow.Int32())),
    [F('size_z', new arrow.Int32()), F('size_c', new arrow.Int16()), F('size_t', new arrow.Int32())]));
  const px = listOf(new arrow.Uint8());
  const planeT = new arrow.Struct([F('z', new arrow.Int32()), F('t', new arrow.Int32()),
    F('c', new arrow.Int16()), F('pixels', px)]);
  const chunkT = new arrow.Struct(['t', 'z', 'y', 'x', 'shape_z', 'shape_y', 'shape_x']
    .map((n) => F(n, new arrow.Int32())).concat([F('c', new arrow.Int16()), F('pixels', px)]));
  const pixelsField = layout === 'chunks' ? F('chunks', listOf(chunkT)) : F('planes', listOf(planeT));
  const omeT = new arrow.Struct([F('type', new arrow.Utf8()), F('name', new arrow.Utf8()),
    F('pixels_meta', pmT), pixelsField]);
  const rows = [];
  for (let i = 0; i < 3; i++) {
    const p = [];
    for (let k = 0; k < 12; k++) p.push((40 * i + k) & 255);
    const pm = { type: 'uint8', size_x: 4, size_y: 3, size_z: 1, size_c: 1, size_t: 1 };
    const row = { type: 'ome.arrow', name: `img${i}`, pixels_meta: pm };
    if (layout === 'chunks') {
      // two chunks of 4x2 and 4x1 rows
      row.chunks = [
        { t: 0, c: 0, z: 0, y: 0, x: 0, shape_z: 1, shape_y: 2, shape_x: 4, pixels: p.slice(0, 8) },
        { t: 0, c: 0, z: 0, y: 2, x: 0, shape_z: 1, shape_y: 1, shape_x: 4, pixels: p.slice(8) }];
    } else {
      row.planes = [{ z: 0, t: 0, c: 0, pixels: p }];
    }
    rows.push(row);
  }
  const table = new arrow.Table({ ome_image: arrow.vectorFromArray(rows, omeT) });
  await (await lancedb.connect(db)).createTable('images', table);
}

main().catch((e) => { process.stderr.write(`${e.stack || e}\n`); process.exit(1); });
