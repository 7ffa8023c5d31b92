// Where everything of a fabric map goes: switches in tier rows (core, spine,
// leaf), each leaf's adapters fanned out below it, switch-to-switch cables
// bundled per switch pair. Pure: analysis in, positions out (the benchmark
// times this with the drawing).
(function () {
  "use strict";
  const PER_ROW = 16, DX = 9, ROW_DY = 20, LEAF_GAP = 16;
  const Y = { core: 40, spine: 190, unknown: 40, leaf: 360 };
  const FAN_TOP = 60;

  function layout(a) {
    const switches = new Map(a.switches.map((s) => [s.guid, { ...s, kind: "switch" }]));
    const byLeaf = new Map();
    const adapters = [];
    for (const ad of a.adapters) {
      if (ad.role !== "adapter" || !ad.leaf_guid || !switches.has(ad.leaf_guid)) continue;
      const list = byLeaf.get(ad.leaf_guid) || [];
      list.push(ad);
      byLeaf.set(ad.leaf_guid, list);
    }
    // Leaves of one rail side by side, so colouring by rail reads as bands.
    const leaves = [...switches.values()].filter((s) => s.tier === "leaf")
      .sort((p, q) => (p.rail || "~").localeCompare(q.rail || "~") || p.description.localeCompare(q.description));
    let x = 0;
    for (const leaf of leaves) {
      const list = (byLeaf.get(leaf.guid) || []).sort((p, q) => (p.leaf_port || 0) - (q.leaf_port || 0));
      const cols = Math.max(1, Math.min(PER_ROW, list.length));
      const width = Math.max(70, cols * DX + 16);
      leaf.x = x + width / 2; leaf.y = Y.leaf; leaf.w = Math.min(width - 8, 92); leaf.h = 18;
      list.forEach((ad, i) => {
        const row = Math.floor(i / PER_ROW), col = i % PER_ROW;
        const inRow = Math.min(PER_ROW, list.length - row * PER_ROW);
        const t = inRow > 1 ? (col / (inRow - 1)) * 2 - 1 : 0;  // -1..1 across the row
        const node = { ...ad, kind: "adapter", leaf };
        node.x = leaf.x + (col - (inRow - 1) / 2) * DX;
        node.y = leaf.y + FAN_TOP + row * ROW_DY + 14 * t * t;  // a fan, not a comb
        // The cable leaves the leaf where its port is, so crossings stay few.
        node.px = leaf.x - leaf.w / 2 + ((i + 0.5) / list.length) * leaf.w;
        adapters.push(node);
      });
      x += width + LEAF_GAP;
    }
    const width = Math.max(x - LEAF_GAP, 400);
    for (const tier of ["spine", "core", "unknown"]) {
      const row = [...switches.values()].filter((s) => s.tier === tier)
        .sort((p, q) => p.description.localeCompare(q.description));
      const step = width / Math.max(1, row.length);
      row.forEach((s, i) => {
        s.x = tier === "unknown" ? -120 - i * 100 : step * (i + 0.5);
        s.y = Y[tier]; s.w = Math.min(110, Math.max(60, step - 12)); s.h = 20;
      });
    }
    for (const s of switches.values()) if (s.x === undefined) { s.x = -120; s.y = Y.core; s.w = 60; s.h = 20; }

    // One bundle per switch pair: a spine and a leaf joined by four cables are one stroke, four thick.
    const bundles = new Map();
    for (const l of a.links) {
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
    const adapterByGuid = new Map(adapters.map((ad) => [ad.guid, ad]));
    const degraded = (a.degraded_links || []).map((d) => {
      const ends = [d.a, d.b].map((e) => adapterByGuid.get(e.guid) || switches.get(e.guid)).filter(Boolean);
      return ends.length === 2 ? { ...d, p: ends[0], q: ends[1] } : null;
    }).filter(Boolean);
    const misaligned = new Set((a.rail_misalignment || []).map((m) => m.adapter_guid));
    const ys = [...switches.values()].map((s) => s.y).concat(adapters.map((ad) => ad.y));
    return {
      switches, adapters, adapterByGuid, bundles: [...bundles.values()], degraded, misaligned,
      extent: [[Math.min(0, ...[...switches.values()].map((s) => s.x - s.w)), 0], [width, Math.max(...ys, Y.leaf) + 30]],
    };
  }

  // Straight down from an upper switch, curving into the lower one.
  function bundlePath(b) {
    const x0 = b.lo.x, y0 = b.lo.y - b.lo.h / 2, x1 = b.hi.x, y1 = b.hi.y + b.hi.h / 2;
    const my = (y0 + y1) / 2;
    return [x0, y0, x0, my, x1, my, x1, y1];
  }

  function endpoints(ad) {
    return [ad.x, ad.y - 3, ad.px, ad.leaf.y + ad.leaf.h / 2];
  }

  window.FabricLayout = { layout, bundlePath, endpoints };
})();
