// The cluster's own adapters on the map: each port's state from the last
// heartbeat (down glows red) and its traffic from two readings of its
// counters (particles run each cable as fast as it sends and receives).
// One requestAnimationFrame loop moves every particle; none runs when no
// port carries traffic.
(function () {
  "use strict";
  const prev = new Map();  // "node device" -> {at, xmit, rcv}
  let particles = [], running = false, last = 0;

  // Bytes per second between two readings; null (unknown, not idle) until two exist.
  function rates(ports) {
    const out = new Map();
    for (const p of ports) {
      const key = `${p.node} ${p.device}`;
      const before = prev.get(key);
      let bps = null;
      if (before && p.at && before.at && p.at > before.at && p.xmit_bytes !== null && p.rcv_bytes !== null) {
        const dt = p.at - before.at;
        bps = { xmit: Math.max(0, (p.xmit_bytes - before.xmit) / dt), rcv: Math.max(0, (p.rcv_bytes - before.rcv) / dt) };
      } else if (before && before.bps && p.at === before.at) {
        bps = before.bps;  // same reading again: keep what it measured
      }
      prev.set(key, { at: p.at, xmit: p.xmit_bytes, rcv: p.rcv_bytes, bps });
      out.set(key, { ...p, bps });
    }
    return out;
  }

  function update(L, layer, ports) {
    const byKey = rates(ports);
    const { svg } = FabricDraw;
    layer.live.replaceChildren();
    layer.particles.replaceChildren();
    particles = [];
    let matched = 0, down = 0;
    for (const ad of L.adapters) {
      const p = ad.node && ad.device ? byKey.get(`${ad.node} ${ad.device}`) : null;
      ad.live = p || null;
      if (!p) continue;
      matched++;
      const up = String(p.state || "").startsWith("ACTIVE") && p.phys_state === "LinkUp";
      if (!up) down++;
      const c = svg("circle", { cx: ad.x, cy: ad.y, r: up ? 5 : 6, class: `port ${up ? "up" : "down"}`, "data-adapter": ad.guid, "data-node": ad.node }, layer.live);
      svg("title", {}, c).textContent = `${ad.node} ${ad.device}: ${p.state || "-"} / ${p.phys_state || "-"}`;
      if (!up || !p.bps) continue;
      const e = FabricLayout.endpoints(ad);
      const line = (p.rate_gbps || ad.rate || 100) * 1e9 / 8;
      for (const [dir, bps] of [["up", p.bps.xmit], ["down", p.bps.rcv]]) {
        if (!(bps > 0)) continue;
        // Cables per second: a trickle still moves, a saturated link races.
        const speed = 0.12 + 1.6 * Math.min(1, bps / line);
        for (let i = 0; i < 3; i++) {
          const dot = svg("circle", { r: 1.6, class: `particle ${dir}` }, layer.particles);
          particles.push({ dot, e, dir, speed, u: i / 3 });
        }
      }
    }
    if (particles.length && !running) { running = true; last = performance.now(); requestAnimationFrame(step); }
    return { matched, down };
  }

  function step(now) {
    if (!particles.length) { running = false; return; }
    const dt = Math.min(0.1, (now - last) / 1000);
    last = now;
    for (const p of particles) {
      p.u = (p.u + p.speed * dt) % 1;
      const u = p.dir === "up" ? p.u : 1 - p.u;
      p.dot.setAttribute("cx", p.e[0] + (p.e[2] - p.e[0]) * u);
      p.dot.setAttribute("cy", p.e[1] + (p.e[3] - p.e[1]) * u);
    }
    requestAnimationFrame(step);
  }

  window.FabricLive = { update };
})();
