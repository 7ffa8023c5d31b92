// /admin/nvlink: each multi-node NVLink domain drawn as its rack — the NVLink
// Switch band on top, light running down the backplane, one tray per node
// with its GPU chips and the replicas it carries — and, beside it, what
// keeps each tray out and which trays each replica spans.
(function () {
  "use strict";
  const { el } = LG;
  const racks = document.getElementById("racks");
  const W = 620, TOP = 64, TRAY_H = 30, GAP = 6, PAD = 14, CHIP_W = 34;
  const TW = W - 2 * PAD - 32, CHIPS_X = TW - 24 - 4 * (CHIP_W + 6), REPS_X = 124;
  const COLORS = ["#4c8dff", "#e0a526", "#c77dff", "#2ec4b6", "#ff6b6b", "#8ac926", "#f15bb5", "#5bc0eb"];

  function chipState(g) {
    if (g.missing) return "missing";
    if (g.problem && !g.degraded) return "out";
    if (g.degraded) return "degraded";
    return "joined";
  }

  // One colour per replica of the domain, in the order its trays come.
  function replicaColours(d) {
    const c = new Map();
    for (const t of d.trays) for (const r of t.replicas) if (!c.has(r.id)) c.set(r.id, COLORS[c.size % COLORS.length]);
    return c;
  }
  const repText = (r) => `${r.model} #${r.id}`;
  const clip = (s, px) => { const max = Math.max(3, Math.floor(px / 6)); return s.length > max ? `${s.slice(0, max - 1)}…` : s; };

  // The replicas a tray carries, as pills between its name and its chips.
  function pills(g, colour) {
    const room = CHIPS_X - 10 - REPS_X;
    g.each(function (t) {
      const reps = t.replicas.length > 3 ? t.replicas.slice(0, 2) : t.replicas;
      const more = t.replicas.length - reps.length;
      const w = (room - (more ? 34 : 0)) / Math.max(1, reps.length) - 4;
      const sel = d3.select(this);
      reps.forEach((r, i) => {
        const p = sel.append("g").attr("class", "rep").attr("data-replica", r.id).attr("transform", `translate(${REPS_X + i * (w + 4)},6)`);
        p.append("rect").attr("width", w).attr("height", TRAY_H - 12).attr("rx", 9).attr("style", `stroke:${colour.get(r.id)};fill:${colour.get(r.id)}33`);
        p.append("text").attr("x", 8).attr("y", 13).text(clip(repText(r), w - 12));
        p.append("title").text(`${repText(r)} · ${r.state}\nGPUs ${r.gpus.join(", ") || "-"} of this tray`);
      });
      if (more) sel.append("text").attr("class", "rep-more").attr("x", CHIPS_X - 38).attr("y", 19).text(`+${more}`)
        .append("title").text(t.replicas.slice(2).map(repText).join("\n"));
    });
  }

  function rack(d, colour) {
    const trays = d.trays;
    const H = TOP + trays.length * (TRAY_H + GAP) + PAD;
    const svg = d3.create("svg").attr("viewBox", `0 0 ${W} ${H}`).attr("class", "rack").attr("data-domain", d.id);
    svg.append("rect").attr("class", "rack-frame").attr("x", 1).attr("y", 1).attr("width", W - 2).attr("height", H - 2).attr("rx", 8);
    // NVLink Switch band
    const band = svg.append("g").attr("class", "switch-band").attr("transform", `translate(${PAD},${PAD})`);
    band.append("rect").attr("width", W - 2 * PAD).attr("height", 30).attr("rx", 4);
    band.append("text").attr("x", (W - 2 * PAD) / 2).attr("y", 19).attr("text-anchor", "middle")
      .text(`NVLink Switch · clique ${d.clique_id} · ${d.joined_gpus}/${d.gpus} GPUs joined`);
    // backplane: two spines with light running down them
    for (const x of [PAD + 6, W - PAD - 6]) {
      svg.append("line").attr("class", "backplane").attr("x1", x).attr("x2", x).attr("y1", PAD + 30).attr("y2", H - PAD);
      svg.append("line").attr("class", "backplane-light").attr("x1", x).attr("x2", x).attr("y1", PAD + 30).attr("y2", H - PAD);
    }
    const g = svg.selectAll("g.tray").data(trays).join("g")
      .attr("class", (t) => `tray ${t.joined ? "joined" : "out"}`)
      .attr("data-node", (t) => t.node)
      .attr("data-replicas", (t) => t.replicas.map((r) => r.id).join(" "))
      .attr("transform", (t, i) => `translate(${PAD + 16},${TOP + i * (TRAY_H + GAP)})`);
    g.append("rect").attr("class", "tray-body").attr("width", TW).attr("height", TRAY_H).attr("rx", 3);
    g.append("a").attr("href", (t) => `/nodes/${encodeURIComponent(t.node)}`).append("text")
      .attr("class", "tray-name").attr("x", 8).attr("y", 19).text((t) => t.node);
    pills(g, colour);
    g.append("circle").attr("class", (t) => `imex ${t.imex_up ? "up" : "down"}`).attr("cx", TW - 12).attr("cy", TRAY_H / 2).attr("r", 4)
      .append("title").text((t) => `IMEX ${t.imex_up ? "up" : "down"}`);
    // Each chip, and under it a bar in the colour of the replica that holds it.
    g.each(function (t) {
      const holder = new Map();
      for (const r of t.replicas) for (const i of r.gpus) holder.set(i, r);
      const sel = d3.select(this);
      t.gpus.forEach((c, i) => {
        const x = CHIPS_X + i * (CHIP_W + 6), r = holder.get(c.index);
        sel.append("rect").attr("class", `chip ${chipState(c)}`).attr("data-gpu", c.index)
          .attr("x", x).attr("y", 5).attr("width", CHIP_W).attr("height", TRAY_H - 12).attr("rx", 3)
          .append("title").text(`GPU ${c.index} · ${c.class || "-"}\n${c.problem || (c.degraded ? "degraded bandwidth" : "joined")}${r ? `\n${repText(r)}` : ""}`);
        if (r) sel.append("rect").attr("class", "chip-owner").attr("data-replica", r.id).attr("x", x).attr("y", TRAY_H - 5)
          .attr("width", CHIP_W).attr("height", 3).attr("rx", 1.5).attr("fill", colour.get(r.id));
      });
    });
    return svg.node();
  }

  // Pointing at a replica (its pill, its tray, its line in the list) lights
  // every tray it spans and dims the rest.
  function highlight(ids) {
    const on = new Set(ids);
    for (const t of racks.querySelectorAll("g.tray")) {
      const mine = (t.dataset.replicas || "").split(" ").filter((x) => on.has(x));
      t.classList.toggle("hl", mine.length > 0);
      t.classList.toggle("dim", on.size > 0 && !mine.length);
      for (const p of t.querySelectorAll(".rep")) p.classList.toggle("hl", on.has(p.dataset.replica));
    }
    for (const li of racks.querySelectorAll("li[data-replica]")) li.classList.toggle("hl", on.has(li.dataset.replica));
  }
  function pointed(ev) {
    const rep = ev.target.closest && ev.target.closest("[data-replica]");
    if (rep) return [rep.dataset.replica];
    const tray = ev.target.closest && ev.target.closest("g.tray");
    return tray && tray.dataset.replicas ? tray.dataset.replicas.split(" ") : [];
  }
  // What the pointer is on, so that a redraw (every change of a node or a
  // model redraws the racks) keeps it lit while the pointer stays still.
  let pointing = [];
  racks.addEventListener("mouseover", (ev) => highlight((pointing = pointed(ev))));
  racks.addEventListener("mouseleave", () => highlight((pointing = [])));

  function reasons(d) {
    const out = d.trays.filter((t) => !t.joined);
    if (!out.length) return el("p", { class: "ok" }, "Every tray is in the domain.");
    return el("ul", { class: "held-out" }, out.map((t) => el("li", { "data-node": t.node }, [
      el("a", { href: `/nodes/${encodeURIComponent(t.node)}` }, t.node), ": ",
      el("span", { class: "reason" }, t.held_out_because.join("; ") || "not joined"),
    ])));
  }

  function replicaList(d, colour) {
    const spans = new Map();
    for (const t of d.trays) for (const r of t.replicas) {
      const s = spans.get(r.id) || spans.set(r.id, { r, trays: [] }).get(r.id);
      s.trays.push(t.node);
    }
    if (!spans.size) return el("p", { class: "dim" }, "No replica runs on these trays.");
    return el("ul", { class: "rack-replicas" }, [...spans.values()].map(({ r, trays }) => el("li", { "data-replica": r.id }, [
      el("i", { style: `background:${colour.get(r.id)}` }), el("b", {}, repText(r)), ` · ${r.state} · `,
      el("span", { class: "dim" }, `${trays.length} tray${trays.length === 1 ? "" : "s"}: ${trays.join(", ")}`),
    ])));
  }

  function domainCard(x) {
    const colour = replicaColours(x);
    return el("section", { class: "card rack-card" }, [
      el("h2", {}, [`Domain `, el("code", {}, x.cluster_uuid), el("small", { class: "dim" }, ` clique ${x.clique_id} · ${x.joined_trays}/${x.trays.length} trays joined`)]),
      el("div", { class: "rack-row" }, [rack(x, colour), el("div", { class: "why" }, [
        el("h3", {}, "Replicas"), replicaList(x, colour), el("h3", {}, "Kept out"), reasons(x)])]),
    ]);
  }

  async function refresh() {
    const d = await LG.getJSON("/api/v1/nvlink");
    const doms = d.domains || [];
    document.getElementById("summary").textContent = doms.length
      ? `${doms.length} domain(s) · ${doms.reduce((n, x) => n + x.joined_trays, 0)}/${doms.reduce((n, x) => n + x.trays.length, 0)} trays in`
      : "";
    racks.replaceChildren(...(doms.length ? doms.map(domainCard)
      : [el("p", { class: "dim" }, "No multi-node NVLink domain: a single machine's NVSwitch is no domain.")]));
    highlight(pointing);
    racks.dataset.loaded = String(Number(racks.dataset.loaded || 0) + 1);
  }

  refresh();
  LG.live(["nvlink changed", "node changed", "models changed"], 15000, refresh);
})();
