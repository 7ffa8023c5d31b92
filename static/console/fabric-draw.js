// Drawing a fabric map. The many things (adapters, their cables, bundled
// uplinks) go on one canvas: thousands of SVG nodes would make every pan
// frame a re-layout of the DOM. The few things one points at, labels or
// animates (switches, degraded cables, live ports, particles) are SVG on top,
// sharing the canvas's zoom transform.
(function () {
  "use strict";
  const NS = "http://www.w3.org/2000/svg";
  const RATES = [[800, "#c77dff", "XDR 800"], [400, "#4c8dff", "NDR 400"], [200, "#2ec4b6", "HDR 200"], [100, "#8ac926", "EDR 100"], [50, "#e0a526", "FDR 56"], [0, "#f28c28", "below FDR"]];
  const RAILS = ["#4c8dff", "#2ec4b6", "#e0a526", "#c77dff", "#ff6b6b", "#8ac926", "#ff9f1c", "#5bc0eb", "#f15bb5", "#9b5de5"];
  const UNKNOWN = "#5a6272";

  const rateColor = (g) => (g === null || g === undefined ? UNKNOWN : (RATES.find(([min]) => g >= min) || RATES[RATES.length - 1])[1]);
  const railColor = (n) => (n === null || n === undefined ? UNKNOWN : RAILS[n % RAILS.length]);
  const railOfLeaf = (leaf) => { const m = /(\d+)\s*$/.exec(leaf.rail || ""); return m ? Number(m[1]) : null; };
  const shortName = (d) => d.replace(/^MF0;/, "").replace(/:.*$/, "");

  function adapterColor(ad, mode) { return mode === "rail" ? railColor(ad.device_number) : rateColor(ad.rate); }

  // One beginPath per colour: a frame costs a few dozen strokes, not thousands.
  function batched(ctx, items, colorOf, trace, finish) {
    const groups = new Map();
    for (const it of items) {
      const c = colorOf(it);
      (groups.get(c) || groups.set(c, []).get(c)).push(it);
    }
    for (const [c, list] of groups) {
      ctx.beginPath();
      for (const it of list) trace(it);
      finish(c);
    }
  }

  function paint(canvas, L, st) {
    const ctx = canvas.getContext("2d");
    const { k, x, y } = st.t, dpr = st.dpr;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.setTransform(dpr * k, 0, 0, dpr * k, dpr * x, dpr * y);
    const x0 = -x / k - 20, x1 = (canvas.width / dpr - x) / k + 20;
    const y0 = -y / k - 20, y1 = (canvas.height / dpr - y) / k + 20;
    const inView = (ad) => ad.x >= x0 && ad.x <= x1 && ad.y >= y0 - 80 && ad.y <= y1;
    const seen = (b) => b[2] >= x0 && b[0] <= x1 && b[3] >= y0 && b[1] <= y1;
    const bundles = L.bundles.filter((b) => seen(b.box)), stems = L.stems.filter((s) => seen(s.box));
    const adapters = L.adapters.filter(inView);
    const f = st.focus;
    const passes = f ? [[0.07, false], [1, true]] : [[1, null]];
    for (const [alpha, focused] of passes) {
      ctx.globalAlpha = alpha;
      const keepB = focused === null ? bundles : bundles.filter((b) => f.bundles.has(b.key) === focused);
      const keepS = focused === null ? stems : stems.filter((s) => [...s.keys].some((key) => f.bundles.has(key)) === focused);
      const keepA = focused === null ? adapters : adapters.filter((ad) => f.adapters.has(ad.guid) === focused);
      batched(ctx, keepB, (b) => `${st.mode === "rail" ? railColor(railOfLeaf(b.lo)) : rateColor(b.rate)}|${Math.min(6, Math.ceil(Math.sqrt(b.count)))}`,
        (b) => { const p = FabricLayout.bundlePath(b); ctx.moveTo(p[0], p[1]); ctx.bezierCurveTo(p[2], p[3], p[4], p[5], p[6], p[7]); },
        (key) => { const [c, w] = key.split("|"); ctx.strokeStyle = c; ctx.lineWidth = Math.max(0.5 + 0.8 * Number(w), 0.8 / k); ctx.stroke(); });
      batched(ctx, keepS, (s) => `${st.mode === "rail" ? railColor(railOfLeaf(s.leaf)) : rateColor(s.rate)}|${Math.min(6, Math.ceil(Math.sqrt(s.count)))}`,
        (s) => { const p = s.points; ctx.moveTo(p[0], p[1]); for (let i = 2; i < p.length; i += 2) ctx.lineTo(p[i], p[i + 1]); },
        (key) => { const [c, w] = key.split("|"); ctx.strokeStyle = c; ctx.lineWidth = Math.max(0.5 + 0.8 * Number(w), 0.8 / k); ctx.stroke(); });
      batched(ctx, keepA, (ad) => adapterColor(ad, st.mode),
        (ad) => { const e = FabricLayout.endpoints(ad); ctx.moveTo(e[0], e[1]); ctx.lineTo(e[2], e[3]); },
        (c) => { ctx.strokeStyle = c; ctx.lineWidth = Math.max(0.7, 0.6 / k); ctx.stroke(); });
      batched(ctx, keepA, (ad) => adapterColor(ad, st.mode),
        (ad) => { ctx.moveTo(ad.x + 3.2, ad.y); ctx.arc(ad.x, ad.y, 3.2, 0, 2 * Math.PI); },
        (c) => { ctx.fillStyle = c; ctx.fill(); });
      const odd = keepA.filter((ad) => L.misaligned.has(ad.guid));
      if (odd.length) {
        ctx.beginPath();
        for (const ad of odd) { ctx.moveTo(ad.x + 5.5, ad.y); ctx.arc(ad.x, ad.y, 5.5, 0, 2 * Math.PI); }
        ctx.strokeStyle = "#e0a526"; ctx.lineWidth = 1.4; ctx.stroke();
      }
    }
    ctx.globalAlpha = 1;
    // Names of adapters once they are big enough to read, and only those in view.
    if (k >= 2.2) {
      ctx.fillStyle = "#c5ccd8"; ctx.font = "5px system-ui, sans-serif"; ctx.textAlign = "center";
      for (const ad of adapters) if (!f || f.adapters.has(ad.guid)) {
        ctx.fillText(ad.device || "", ad.x, ad.y + 10);
        if (k >= 4) ctx.fillText(ad.node || ad.description, ad.x, ad.y + 16);
      }
    }
  }

  function svg(tag, attrs, parent) {
    const n = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
    if (parent) parent.appendChild(n);
    return n;
  }

  function curve(p, q) {
    if (p.kind === "adapter" || q.kind === "adapter") {
      const ad = p.kind === "adapter" ? p : q, e = FabricLayout.endpoints(ad);
      return `M${e[0]},${e[1]}L${e[2]},${e[3]}`;
    }
    const [lo, hi] = p.y >= q.y ? [p, q] : [q, p];
    const v = FabricLayout.bundlePath({ lo, hi }), s = FabricLayout.stem(lo);
    return `${s ? `M${s[0]},${s[1]}L${s.slice(2).join(",")}` : ""}M${v[0]},${v[1]}C${v[2]},${v[3]} ${v[4]},${v[5]} ${v[6]},${v[7]}`;
  }

  // The SVG layer: built once per map; returns what the page updates.
  function overlay(g, L, mode) {
    g.replaceChildren();
    const deg = svg("g", { class: "degraded" }, g);
    for (const d of L.degraded) {
      const path = curve(d.p, d.q);
      const title = `degraded ${d.kind} cable: ${d.rate_text || d.rate} where ${d.expected_rate_text || d.expected_rate} is expected\n${d.a.description} [${d.a.port}] – ${d.b.description} [${d.b.port}]`;
      const el = svg("path", { d: path, class: "degraded-link", "data-a": d.a.guid, "data-b": d.b.guid }, deg);
      svg("title", {}, el).textContent = title;
      const mid = pathMid(d.p, d.q);
      const m = svg("g", { class: "degraded-marker", transform: `translate(${mid[0]},${mid[1]})` }, deg);
      svg("circle", { r: 6 }, m);
      svg("text", { y: 3.5, "text-anchor": "middle" }, m).textContent = "!";
      svg("title", {}, m).textContent = title;
    }
    const sw = svg("g", { class: "switches" }, g);
    const nodes = new Map(), cut = sharedPrefix([...L.switches.values()].map((s) => shortName(s.description)));
    for (const s of L.switches.values()) {
      const n = svg("g", { class: `switch ${s.tier}`, transform: `translate(${s.x},${s.y})`, "data-guid": s.guid, tabindex: 0 }, sw);
      const fill = mode === "rail" && s.tier === "leaf" ? railColor(railOfLeaf(s)) : null;
      svg("rect", { x: -s.w / 2, y: -s.h / 2, width: s.w, height: s.h, rx: 4, ...(fill ? { style: `stroke:${fill}` } : {}) }, n);
      svg("text", { y: 3.5, "text-anchor": "middle" }, n).textContent = clip(shortName(s.description).slice(cut), s.w);
      n.setAttribute("aria-label", `${s.tier} switch ${shortName(s.description)}`);  // the page's tooltip says the rest
      nodes.set(s.guid, n);
    }
    const live = svg("g", { class: "live-ports" }, g);
    const particles = svg("g", { class: "particles" }, g);
    const marks = svg("g", { class: "search-marks" }, g);
    return { switches: nodes, live, particles, marks, degraded: deg };
  }

  function pathMid(p, q) {
    if (p.kind === "adapter" || q.kind === "adapter") {
      const e = FabricLayout.endpoints(p.kind === "adapter" ? p : q);
      return [(e[0] + e[2]) / 2, (e[1] + e[3]) / 2];
    }
    return [(p.x + q.x) / 2, (p.y + q.y) / 2];
  }

  // Labels drop what every switch's name starts with ("ib-a-"), up to a separator.
  function sharedPrefix(names) {
    if (names.length < 2) return 0;
    let n = 0;
    while (names.every((x) => x.length > n + 1 && x[n] === names[0][n])) n++;
    if (!n) return 0;
    const sep = Math.max(...["-", "_", ".", " "].map((c) => names[0].lastIndexOf(c, n - 1)));
    return sep + 1;
  }

  // Too long for its box: the middle goes, since names differ most at the end.
  function clip(text, w) {
    const max = Math.max(4, Math.floor(w / 6));
    if (text.length <= max) return text;
    const head = Math.floor((max - 1) / 3);
    return `${text.slice(0, head)}…${text.slice(text.length - (max - 1 - head))}`;
  }

  function legend(box, L, mode) {
    const items = [];
    if (mode === "rail") {
      const rails = [...new Set(L.adapters.map((a) => a.device_number))].sort((p, q) => (p ?? 99) - (q ?? 99));
      for (const r of rails) items.push([railColor(r), r === null ? "no rail" : `rail ${r} (mlx5_${r})`]);
    } else {
      const seen = new Set(L.adapters.map((a) => a.rate).concat(L.bundles.map((b) => b.rate)));
      for (const [min, c, label] of RATES) if ([...seen].some((g) => g !== null && g >= min && (RATES.find(([m]) => g >= m) || [])[0] === min)) items.push([c, `${label} Gb/s`]);
    }
    box.replaceChildren();
    for (const [c, label] of items) {
      const span = document.createElement("span"), sw = document.createElement("i");
      sw.style.background = c;
      span.append(sw, label);
      box.append(span);
    }
    box.insertAdjacentHTML("beforeend", '<span class="lg-deg"><i></i>degraded cable</span> <span class="lg-odd"><i></i>off its rail</span> <span class="lg-up"><i></i>our port up</span> <span class="lg-down"><i></i>our port down</span> <span class="lg-part"><i></i>traffic</span>');
  }

  window.FabricDraw = { paint, overlay, legend, svg, rateColor, railColor, shortName };
})();
