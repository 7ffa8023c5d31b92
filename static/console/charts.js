// Small line charts of an hour of PromQL, read through the control plane's
// proxy (/console/api/promql). A chart with no Prometheus says so instead of
// drawing an empty frame that reads like "zero".
(function () {
  "use strict";
  const W = 320, H = 120, M = { t: 8, r: 10, b: 20, l: 44 };
  const PALETTE = ["#4c8dff", "#2ec4b6", "#e0a526", "#c77dff", "#ff6b6b", "#8ac926", "#ff9f1c", "#5bc0eb"];

  async function range(query) {
    const r = await LG.request("GET", `/console/api/promql?seconds=3600&query=${encodeURIComponent(query)}`);
    if (r.data && r.data.configured === false) return { configured: false };
    if (!r.ok || !r.data || r.data.status !== "success") {
      return { configured: true, error: (r.data && (r.data.detail || r.data.error)) || `HTTP ${r.status}` };
    }
    return { configured: true, series: r.data.data.result };
  }

  function frame(container, title) {
    const box = LG.el("div", { class: "chart" }, [LG.el("h4", { text: title })]);
    container.append(box);
    return box;
  }

  // spec: {title, query, unit: fmt function, label: series => legend text}
  async function draw(container, spec) {
    const box = spec.box || frame(container, spec.title);
    spec.box = box;
    const got = await range(spec.query);
    box.querySelectorAll("svg, .note, .legend").forEach((n) => n.remove());
    if (!got.configured) { box.append(LG.el("p", { class: "note" }, "Prometheus is not configured (LLMGW_PROMETHEUS_URL)")); return got; }
    if (got.error) { box.append(LG.el("p", { class: "note bad" }, `Prometheus: ${got.error}`)); return got; }
    const series = got.series.map((s, i) => ({
      name: spec.label ? spec.label(s.metric) : (s.metric.node || ""),
      color: PALETTE[i % PALETTE.length],
      points: s.values.map(([t, v]) => [new Date(t * 1000), Number(v)]).filter((p) => isFinite(p[1])),
    }));
    if (!series.length || !series.some((s) => s.points.length)) {
      box.append(LG.el("p", { class: "note" }, "no samples in the last hour"));
      return got;
    }
    const all = series.flatMap((s) => s.points);
    const x = d3.scaleTime().domain(d3.extent(all, (p) => p[0])).range([M.l, W - M.r]);
    const y = d3.scaleLinear().domain([0, spec.max || d3.max(all, (p) => p[1]) || 1]).nice().range([H - M.b, M.t]);
    const svg = d3.select(box).append("svg").attr("viewBox", `0 0 ${W} ${H}`).attr("class", "line-chart");
    svg.append("g").attr("class", "axis").attr("transform", `translate(0,${H - M.b})`).call(d3.axisBottom(x).ticks(4).tickSizeOuter(0));
    svg.append("g").attr("class", "axis").attr("transform", `translate(${M.l},0)`)
      .call(d3.axisLeft(y).ticks(4).tickFormat(spec.unit || d3.format("~s")));
    const line = d3.line().x((p) => x(p[0])).y((p) => y(p[1]));
    svg.selectAll("path.series").data(series).join("path").attr("class", "series")
      .attr("fill", "none").attr("stroke", (s) => s.color).attr("stroke-width", 1.6).attr("d", (s) => line(s.points));
    if (series.length > 1 || spec.label) {
      box.append(LG.el("div", { class: "legend" }, series.map((s) =>
        LG.el("span", {}, [LG.el("i", { style: `background:${s.color}` }), s.name]))));
    }
    return got;
  }

  window.Charts = { draw };
})();
