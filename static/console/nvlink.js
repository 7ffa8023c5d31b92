// /admin/nvlink: each multi-node NVLink domain drawn as its rack — the NVLink
// Switch band on top, light running down the backplane, one tray per node
// with its GPU chips — and, beside it, what keeps each tray out.
(function () {
  "use strict";
  const { el } = LG;
  const racks = document.getElementById("racks");
  const W = 460, TOP = 64, TRAY_H = 30, GAP = 6, PAD = 14;

  function chipState(g) {
    if (g.missing) return "missing";
    if (g.problem && !g.degraded) return "out";
    if (g.degraded) return "degraded";
    return "joined";
  }

  function rack(d) {
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
      .attr("transform", (t, i) => `translate(${PAD + 16},${TOP + i * (TRAY_H + GAP)})`);
    const tw = W - 2 * PAD - 32;
    g.append("rect").attr("class", "tray-body").attr("width", tw).attr("height", TRAY_H).attr("rx", 3);
    g.append("a").attr("href", (t) => `/nodes/${encodeURIComponent(t.node)}`).append("text")
      .attr("class", "tray-name").attr("x", 8).attr("y", 19).text((t) => t.node);
    g.append("circle").attr("class", (t) => `imex ${t.imex_up ? "up" : "down"}`).attr("cx", tw - 12).attr("cy", TRAY_H / 2).attr("r", 4)
      .append("title").text((t) => `IMEX ${t.imex_up ? "up" : "down"}`);
    const chipW = 34, x0 = tw - 24 - 4 * (chipW + 6);
    g.selectAll("rect.chip").data((t) => t.gpus).join("rect")
      .attr("class", (c) => `chip ${chipState(c)}`).attr("data-gpu", (c) => c.index)
      .attr("x", (c, i) => x0 + i * (chipW + 6)).attr("y", 5).attr("width", chipW).attr("height", TRAY_H - 10).attr("rx", 3)
      .append("title").text((c) => `GPU ${c.index} · ${c.class || "-"}\n${c.problem || (c.degraded ? "degraded bandwidth" : "joined")}`);
    return svg.node();
  }

  function reasons(d) {
    const out = d.trays.filter((t) => !t.joined);
    if (!out.length) return el("p", { class: "ok" }, "Every tray is in the domain.");
    return el("ul", { class: "held-out" }, out.map((t) => el("li", { "data-node": t.node }, [
      el("a", { href: `/nodes/${encodeURIComponent(t.node)}` }, t.node), ": ",
      el("span", { class: "reason" }, t.held_out_because.join("; ") || "not joined"),
    ])));
  }

  async function refresh() {
    const d = await LG.getJSON("/api/v1/nvlink");
    const doms = d.domains || [];
    document.getElementById("summary").textContent = doms.length
      ? `${doms.length} domain(s) · ${doms.reduce((n, x) => n + x.joined_trays, 0)}/${doms.reduce((n, x) => n + x.trays.length, 0)} trays in`
      : "";
    racks.replaceChildren(...(doms.length ? doms.map((x) => el("section", { class: "card rack-card" }, [
      el("h2", {}, [`Domain `, el("code", {}, x.cluster_uuid), el("small", { class: "dim" }, ` clique ${x.clique_id} · ${x.joined_trays}/${x.trays.length} trays joined`)]),
      el("div", { class: "rack-row" }, [rack(x), el("div", { class: "why" }, [el("h3", {}, "Kept out"), reasons(x)])]),
    ])) : [el("p", { class: "dim" }, "No multi-node NVLink domain: a single machine's NVSwitch is no domain.")]));
    racks.dataset.loaded = String(Number(racks.dataset.loaded || 0) + 1);
  }

  refresh();
  LG.live(["nvlink changed", "node changed"], 15000, refresh);
})();
