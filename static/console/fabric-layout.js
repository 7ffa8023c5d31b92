// Where everything of a fabric map goes: switches in tier rows (core, spine,
// leaf), each leaf's adapters fanned out below it, switch-to-switch cables
// bundled per switch pair. Leaves wrap into as many rows as make the whole
// the view's shape, so "Fit" fills the view instead of drawing a thin band.
// Pure: analysis and the view's size in, positions out (the benchmark times
// this with the drawing).
(function () {
  "use strict";
  const PER_ROW = 16, DX = 9, ROW_DY = 20, LEAF_GAP = 16;
  const TOP = 40, TIER_DY = 150, TO_LEAVES = 170, FAN_TOP = 60, BAND_GAP = 110;

  // Each leaf's block: its width and its adapters' places relative to it.
  function blocks(leaves, byLeaf) {
    return leaves.map((leaf) => {
      const list = (byLeaf.get(leaf.guid) || []).sort((p, q) => (p.leaf_port || 0) - (q.leaf_port || 0));
      const cols = Math.max(1, Math.min(PER_ROW, list.length));
      const rows = Math.ceil(list.length / PER_ROW);
      return { leaf, list, width: Math.max(70, cols * DX + 16), depth: FAN_TOP + Math.max(0, rows - 1) * ROW_DY + 14 + 28 };
    });
  }

  // Blocks cut into `n` rows of about equal width, in order (rails stay bands).
  function wrap(bl, n) {
    const total = bl.reduce((s, b) => s + b.width + LEAF_GAP, 0), per = total / n, rows = [[]];
    let w = 0;
    for (const b of bl) {
      if (w > 0 && w + (b.width + LEAF_GAP) / 2 > per * rows.length && rows.length < n) rows.push([]);
      rows[rows.length - 1].push(b);
      w += b.width + LEAF_GAP;
    }
    return rows;
  }

  // The number of leaf rows that draws the map largest in a view of this shape.
  function bestRows(bl, upper, aspect) {
    const depth = Math.max(60, ...bl.map((b) => b.depth));
    let best = { k: 0, rows: [bl] };
    const most = Math.max(1, Math.min(bl.length, 40));
    for (let n = 1; n <= most; n++) {
      const rows = wrap(bl, n);
      const w = Math.max(400, ...rows.map((r) => r.reduce((s, b) => s + b.width + LEAF_GAP, -LEAF_GAP)));
      const h = upper + (n - 1) * (depth + BAND_GAP) + depth;
      const k = Math.min(aspect / w, 1 / h);  // the scale at Fit, for a view 1 high
      if (k > best.k) best = { k, rows, w, h, depth };
    }
    return best;
  }

  function layout(a, view) {
    const aspect = view && view.width > 0 && view.height > 0 ? view.width / view.height : 16 / 9;
    const switches = new Map(a.switches.map((s) => [s.guid, { ...s, kind: "switch" }]));
    const byLeaf = new Map();
    for (const ad of a.adapters) {
      if (ad.role !== "adapter" || !ad.leaf_guid || !switches.has(ad.leaf_guid)) continue;
      (byLeaf.get(ad.leaf_guid) || byLeaf.set(ad.leaf_guid, []).get(ad.leaf_guid)).push(ad);
    }
    // Leaves of one rail side by side, so colouring by rail reads as bands.
    const leaves = [...switches.values()].filter((s) => s.tier === "leaf")
      .sort((p, q) => (p.rail || "~").localeCompare(q.rail || "~") || p.description.localeCompare(q.description));
    const all = [...switches.values()];
    const tiers = ["core", "spine"].filter((t) => all.some((s) => s.tier === t));
    const upper = tiers.length ? (tiers.length - 1) * TIER_DY + TO_LEAVES : 0;
    const best = bestRows(blocks(leaves, byLeaf), upper, aspect);
    // What the chosen rows leave of the view's shape goes to the gaps: wider
    // between leaves, or taller between tiers and rows (within reason).
    const n = best.rows.length, spare = best.w ? aspect * best.h / best.w : 1;
    const sx = spare > 1 ? Math.min(3, spare) : 1, sy = spare < 1 ? Math.min(2, 1 / spare) : 1;
    const gap = LEAF_GAP + (sx - 1) * (best.w + LEAF_GAP) / Math.max(1, Math.max(...best.rows.map((r) => r.length)));
    const tierDy = TIER_DY * sy, toLeaves = TO_LEAVES * sy, bandDy = best.depth + BAND_GAP * sy;
    const leafTop = TOP + (tiers.length ? (tiers.length - 1) * tierDy + toLeaves : 0);
    const adapters = [];
    let width = 400;
    best.rows.forEach((row, r) => {
      let x = 0;
      const y = leafTop + r * bandDy;
      for (const { leaf, list, width: bw } of row) {
        leaf.x = x + bw / 2; leaf.y = y; leaf.w = Math.min(bw - 8, 92); leaf.h = 18; leaf.band = r;
        // A lower row's uplinks climb the lane left of its block (the lanes
        // of rows of equal blocks line up) to above the first row.
        if (r > 0) leaf.lane = { x: x - gap / 2, top: leafTop - 24 };
        list.forEach((ad, i) => {
          const fr = Math.floor(i / PER_ROW), col = i % PER_ROW;
          const inRow = Math.min(PER_ROW, list.length - fr * PER_ROW);
          const t = inRow > 1 ? (col / (inRow - 1)) * 2 - 1 : 0;  // -1..1 across the row
          const node = { ...ad, kind: "adapter", leaf };
          node.x = leaf.x + (col - (inRow - 1) / 2) * DX;
          node.y = leaf.y + FAN_TOP + fr * ROW_DY + 14 * t * t;  // a fan, not a comb
          // The cable leaves the leaf where its port is, so crossings stay few.
          node.px = leaf.x - leaf.w / 2 + ((i + 0.5) / list.length) * leaf.w;
          adapters.push(node);
        });
        x += bw + gap;
      }
      width = Math.max(width, x - gap);
    });
    tiers.forEach((tier, i) => {
      const row = all.filter((s) => s.tier === tier).sort((p, q) => p.description.localeCompare(q.description));
      const step = width / Math.max(1, row.length);
      row.forEach((s, j) => { s.x = step * (j + 0.5); s.y = TOP + i * tierDy; s.w = Math.min(110, Math.max(60, step - 12)); s.h = 20; });
    });
    all.filter((s) => s.x === undefined).forEach((s, i) => { s.x = -120 - i * 100; s.y = TOP; s.w = 60; s.h = 20; });

    const { bundles, stems } = cables(a.links, switches);
    const adapterByGuid = new Map(adapters.map((ad) => [ad.guid, ad]));
    const degraded = (a.degraded_links || []).map((d) => {
      const ends = [d.a, d.b].map((e) => adapterByGuid.get(e.guid) || switches.get(e.guid)).filter(Boolean);
      return ends.length === 2 ? { ...d, p: ends[0], q: ends[1] } : null;
    }).filter(Boolean);
    const misaligned = new Set((a.rail_misalignment || []).map((m) => m.adapter_guid));
    const ys = all.map((s) => s.y).concat(adapters.map((ad) => ad.y + 18));
    const x0 = Math.min(0, ...all.map((s) => s.x - s.w / 2));
    return {
      switches, adapters, adapterByGuid, bundles, stems, degraded, misaligned, rows: n,
      extent: [[x0 - 10, TOP - 20], [width + 10, Math.max(...ys, leafTop) + 12]],
    };
  }

  // One bundle per switch pair: a spine and a leaf joined by four cables
  // are one stroke, four thick. Each with where its curve lies, for the
  // painter to skip those out of view; and one stem a lower-row leaf (its
  // uplinks share its lane), drawn once.
  function cables(links, switches) {
    const bundles = new Map();
    for (const l of links) {
      const p = switches.get(l.a.guid), q = switches.get(l.b.guid);
      if (!p || !q || p === q) continue;
      const [lo, hi] = p.y >= q.y ? [p, q] : [q, p];
      const key = `${lo.guid}|${hi.guid}`;
      const b = bundles.get(key) || { key, lo, hi, count: 0, rate: l.rate, rates: new Set() };
      b.count += 1;
      b.rates.add(l.rate);
      if (l.rate !== null && (b.rate === null || l.rate < b.rate)) b.rate = l.rate;
      bundles.set(key, b);
    }
    const stems = new Map();
    for (const b of bundles.values()) {
      const p = bundlePath(b);
      b.box = [Math.min(p[0], p[6]), Math.min(p[1], p[7]), Math.max(p[0], p[6]), Math.max(p[1], p[7])];
      const st = stem(b.lo);
      if (!st) continue;
      const s = stems.get(b.lo) || stems.set(b.lo, { leaf: b.lo, points: st, count: 0, rate: null, keys: new Set(),
        box: [Math.min(st[0], st[6]), st[7], Math.max(st[0], st[6]), st[1]] }).get(b.lo);
      s.count += b.count; s.keys.add(b.key);
      if (b.rate !== null && (s.rate === null || b.rate < s.rate)) s.rate = b.rate;
    }
    return { bundles: [...bundles.values()], stems: [...stems.values()] };
  }

  // Straight down from an upper switch, curving into the lower one; from a
  // lower row's leaf, from the top of its lane (see stem).
  function bundlePath(b) {
    const lane = b.lo.lane;
    const x0 = lane ? lane.x : b.lo.x, y0 = lane ? lane.top : b.lo.y - b.lo.h / 2, x1 = b.hi.x, y1 = b.hi.y + b.hi.h / 2;
    const my = (y0 + y1) / 2;
    return [x0, y0, x0, my, x1, my, x1, y1];
  }

  // A lower row's leaf up to its lane and up the lane: null for the first row.
  function stem(leaf) {
    const l = leaf.lane;
    if (!l) return null;
    const top = leaf.y - leaf.h / 2, jog = top - 14;
    return [leaf.x, top, leaf.x, jog, l.x, jog, l.x, l.top];
  }

  function endpoints(ad) {
    return [ad.x, ad.y - 3, ad.px, ad.leaf.y + ad.leaf.h / 2];
  }

  window.FabricLayout = { layout, bundlePath, stem, endpoints };
})();
