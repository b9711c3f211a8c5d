// node m-gen.mjs N OBJECTS OUT : Zipf(0.9) oracleGeneral trace, sizes fixed per object
import fs from 'node:fs';
const [n, objs, out] = [Number(process.argv[2]), Number(process.argv[3]), process.argv[4]];
const cdf = new Float64Array(objs); let s = 0;
for (let k = 0; k < objs; k++) cdf[k] = s += 1 / (k + 1) ** 0.9;
for (let k = 0; k < objs; k++) cdf[k] /= s;
let x = 12345 >>> 0; const rnd = () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x / 4294967296; };
const perm = new Uint32Array(objs); for (let i = 0; i < objs; i++) perm[i] = i;
for (let i = objs - 1; i > 0; i--) { const j = Math.floor(rnd() * (i + 1)); const t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
const fd = fs.openSync(out, 'w'); const B = 1 << 20; const buf = Buffer.alloc(B * 24);
for (let done = 0; done < n; ) {
  const m = Math.min(B, n - done);
  for (let i = 0; i < m; i++) {
    const u = rnd(); let lo = 0, hi = objs - 1;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (cdf[mid] < u) lo = mid + 1; else hi = mid; }
    const id = perm[lo] * 7919 + 1000003; const o = i * 24;
    buf.writeUInt32LE(Math.floor((done + i) / 1000), o); buf.writeUInt32LE(id >>> 0, o + 4); buf.writeUInt32LE(Math.floor(id / 4294967296), o + 8);
    buf.writeUInt32LE(1 + (id % 65536), o + 12); buf.writeInt32LE(-1, o + 16); buf.writeInt32LE(-1, o + 20);
  }
  fs.writeSync(fd, buf, 0, m * 24); done += m;
}
fs.closeSync(fd);
