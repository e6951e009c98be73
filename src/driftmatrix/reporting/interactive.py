"""The report's interactive figures: hoverable drift matrices and togglable forgetting curves.

The matrices travel as one inline JSON block that a short script draws on a ``<canvas>`` per model
(a K = 104 cohort of 21 models would be ~230k SVG nodes); the curves are inline SVG, one group per
model. Colours, scale and orientation are those of the static PNG figures.
"""

from __future__ import annotations

import html
import json

import numpy as np

from driftmatrix.analysis.matrixfile import nested_lists
from driftmatrix.reporting import figures
from driftmatrix.reporting.dvcfiles import n_eval_grid

CSS = """
.dm-maps{display:flex;flex-wrap:wrap;gap:1em}.dm-maps figure{margin:0}
.dm-maps canvas{border:1px solid #eee;cursor:crosshair}
.dm-scale{font-size:.8em;margin:.4em 0}.dm-scale i{display:inline-block;width:12em;height:.8em;vertical-align:middle}
.dm-tip{position:fixed;z-index:10;background:#222;color:#fff;padding:.35em .6em;border-radius:4px;
font-size:.8em;white-space:pre;pointer-events:none}
.dm-legend label{margin-right:1em;font-size:.85em;white-space:nowrap}
.dm-legend .sw{display:inline-block;width:1.6em;height:0;border-top:2px solid;vertical-align:middle;margin:0 .3em}
#dm-curves svg{max-width:100%;height:auto}
"""

SCRIPT = r"""
(function(){
var D=JSON.parse(document.getElementById('dm-data').textContent),K=D.slices.length;
var tip=document.getElementById('dm-tip'),M={};
D.models.forEach(function(m){M[m.name]=m;});
function fmt(v,d){return v===null||v===undefined?'n/a':v.toFixed(d);}
function colour(v){if(v===null)return '#e6e6e6';var lo=D.range[0],hi=D.range[1];
  var t=hi>lo?(v-lo)/(hi-lo):0.5;t=Math.max(0,Math.min(1,t));
  return D.colours[Math.round(t*(D.colours.length-1))];}
function draw(c,m){var g=c.getContext('2d'),s=+c.dataset.cell,L=+c.dataset.left,T=+c.dataset.top;
  for(var i=0;i<K;i++)for(var j=0;j<K;j++){g.fillStyle=colour(m.mean[i][j]);g.fillRect(L+j*s,T+(K-1-i)*s,s,s);}
  g.setLineDash([4,3]);g.strokeStyle='rgba(0,0,0,.7)';g.beginPath();g.moveTo(L,T+K*s);g.lineTo(L+K*s,T);g.stroke();
  g.setLineDash([]);g.fillStyle='#333';g.font='10px sans-serif';
  D.ticks.forEach(function(k){g.textAlign='right';g.textBaseline='middle';g.fillText(D.slices[k],L-4,T+(K-1-k+.5)*s);
    g.save();g.translate(L+(k+.5)*s,T+K*s+4);g.rotate(-Math.PI/2);g.textAlign='right';g.fillText(D.slices[k],0,0);g.restore();});}
function cellAt(c,ev){var r=c.getBoundingClientRect(),s=+c.dataset.cell;
  var x=(ev.clientX-r.left)*c.width/r.width-c.dataset.left,y=(ev.clientY-r.top)*c.height/r.height-c.dataset.top;
  var j=Math.floor(x/s),row=Math.floor(y/s);
  return j>=0&&j<K&&row>=0&&row<K?[K-1-row,j]:null;}
function describe(m,i,j){var lag=j-i,v=m.mean[i][j];
  var where=lag===0?'in-distribution':lag>0?'future, lag +'+lag:'past, lag '+lag;
  var lines=[m.name+' \u00b7 trained up to '+D.slices[i]+' \u00b7 evaluated '+D.slices[j]+' ('+where+')'];
  if(v===null)return lines.concat(['not scored']).join('\n');
  lines.push('value '+fmt(v,D.decimals)+(D.unit?' '+D.unit:'')+' \u00b7 seed std '+(m.std?fmt(m.std[i][j],D.decimals):'n/a'));
  lines.push('n_eval '+(m.n_eval&&m.n_eval[i][j]!==null?m.n_eval[i][j]:'n/a')+' \u00b7 seeds '+(m.n_cell?m.n_cell[i][j]:m.n_seeds)+' of '+
    m.n_seeds+(m.seeds?' ('+m.seeds.join(', ')+')':' (ids not recorded)'));
  return lines.join('\n');}
document.querySelectorAll('canvas[data-model]').forEach(function(c){var m=M[c.dataset.model];draw(c,m);
  c.addEventListener('mousemove',function(ev){var ij=cellAt(c,ev);if(!ij){tip.hidden=true;return;}
    tip.textContent=describe(m,ij[0],ij[1]);tip.hidden=false;
    tip.style.left=(ev.clientX+14)+'px';tip.style.top=(ev.clientY+14)+'px';});
  c.addEventListener('mouseleave',function(){tip.hidden=true;});});
document.querySelectorAll('#dm-curves input[data-model]').forEach(function(box){
  box.addEventListener('change',function(){document.querySelectorAll('#dm-curves g[data-model]').forEach(function(g){
    if(g.dataset.model===box.dataset.model)g.style.display=box.checked?'':'none';});});});
})();
"""

STYLES = ("", "6 3", "2 2", "6 2 2 2")  # solid, dashed, dotted, dash-dot: as the PNG curves


def _hex(rgba) -> str:
    return "#" + "".join(f"{round(255 * c):02x}" for c in rgba[:3])


def payload(cohort, decimals: int) -> dict:
    """Everything the script needs: slices, colour scale and per model mean, std, n_eval, seeds
    (``n_cell``, the seeds that scored each cell, only when some seed missed a cell)."""
    import matplotlib as mpl

    sc = figures.scales(cohort)
    cmap = mpl.colormaps[sc["seq"]]
    models = []
    for name, m in cohort.models.items():
        n = n_eval_grid(m)
        models.append({
            "name": name, "mean": nested_lists(m.mean, decimals + 2),
            "std": nested_lists(m.std, decimals + 2) if m.n_seeds > 1 else None,
            "n_eval": None if n is None else nested_lists(n, 0),
            "n_cell": (~np.isnan(m.seed_values)).sum(axis=0).tolist() if np.isnan(m.seed_values).any() else None,
            "n_seeds": m.n_seeds,
            "seeds": list(m.seeds) if m.seeds else None})
    return {"slices": list(cohort.slices), "unit": cohort.unit, "decimals": decimals,
            "range": list(sc["range"]), "colours": [_hex(cmap(t)) for t in np.linspace(0, 1, 64)],
            "ticks": figures.tick_positions(len(cohort.slices)), "models": models}


def colour_bar(data: dict, label: str) -> str:
    """The shared colour scale: a CSS gradient of the same colours the script paints with."""
    lo, hi = data["range"]
    stops = ",".join(data["colours"][:: max(1, len(data["colours"]) // 16)] + data["colours"][-1:])
    return (f'<div class="dm-scale">{lo:.{data["decimals"]}f} <i style="background:linear-gradient(90deg,'
            f'{stops})"></i> {hi:.{data["decimals"]}f} {html.escape(label)}</div>')


def heatmaps(cohort) -> str:
    """One canvas per model (drawn by the script), geometry in data attributes."""
    k = len(cohort.slices)
    cell = max(4, min(36, 320 // k))
    label = max(len(s) for s in cohort.slices) * 6 + 10
    w, h = label + k * cell + 4, 4 + k * cell + label
    return '<div class="dm-maps">' + "".join(
        f'<figure><figcaption>{html.escape(name)}</figcaption><canvas data-model="{html.escape(name)}" '
        f'data-cell="{cell}" data-left="{label}" data-top="4" width="{w}" height="{h}" '
        f'aria-label="drift matrix of {html.escape(name)}"></canvas></figure>'
        for name in cohort.models) + "</div>"


def curves_svg(cohort, ylabel: str, width: int = 720, height: int = 320) -> str:
    """Forgetting curves (mean and seed-std band per model) with one checkbox per model."""
    curves = cohort.curves
    colours = figures.family_colours(cohort.families)
    lo = np.nanmin([np.nanmin(c.mean - np.nan_to_num(c.std)) for c in curves.values()])
    hi = np.nanmax([np.nanmax(c.mean + np.nan_to_num(c.std)) for c in curves.values()])
    lo, hi = (lo - 1, hi + 1) if hi <= lo else (lo, hi)
    n = max(len(c.mean) for c in curves.values())
    left, right, top, bottom = 60, 10, 10, 36

    def px(lag, v):
        x = left + (width - left - right) * (lag / max(n - 1, 1))
        return round(x, 1), round(top + (height - top - bottom) * (hi - v) / (hi - lo), 1)

    axes = [f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#999"/>',
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#999"/>',
            f'<text x="{(left + width) / 2}" y="{height - 4}" text-anchor="middle">lag (slices after the '
            f"training cutoff)</text>",
            f'<text transform="translate(12 {(top + height - bottom) / 2}) rotate(-90)" '
            f'text-anchor="middle">{html.escape(ylabel)}</text>']
    axes += [f'<text x="{px(lag, lo)[0]}" y="{height - bottom + 14}" text-anchor="middle">{lag}</text>'
             for lag in figures.tick_positions(n)]
    for v in np.linspace(lo, hi, 5):
        _, y = px(0, v)
        axes.append(f'<text x="{left - 4}" y="{y + 3}" text-anchor="end">{v:.3g}</text>'
                    f'<line x1="{left}" y1="{y}" x2="{width - right}" y2="{y}" stroke="#eee"/>')
    groups, legend = [], []
    for k, (name, c) in enumerate(curves.items()):
        colour = _hex(colours[cohort.families[name] or "other"])
        dash = STYLES[k % len(STYLES)]
        ok = ~np.isnan(c.mean)
        pts = [px(lag, v) for lag, v in enumerate(c.mean) if ok[lag]]
        band = ""
        if np.any(~np.isnan(c.std[ok])):
            banded = [lag for lag in range(len(c.mean)) if ok[lag] and not np.isnan(c.std[lag])]
            upper = [px(lag, c.mean[lag] + c.std[lag]) for lag in banded]
            lower = [px(lag, c.mean[lag] - c.std[lag]) for lag in banded]
            band = (f'<polygon fill="{colour}" fill-opacity="0.15" stroke="none" points="'
                    + " ".join(f"{x},{y}" for x, y in upper + lower[::-1]) + '"/>')
        dots = "".join(f'<circle cx="{x}" cy="{y}" r="2.5" fill="{colour}"><title>{html.escape(name)} lag {lag}: '
                       f"{c.mean[lag]:.4g}{'' if np.isnan(c.std[lag]) else f' ± {c.std[lag]:.2g}'}</title></circle>"
                       for lag, (x, y) in zip(np.flatnonzero(ok), pts))
        groups.append(f'<g data-model="{html.escape(name)}">{band}<polyline fill="none" stroke="{colour}" '
                      f'stroke-width="1.5" stroke-dasharray="{dash}" points="'
                      + " ".join(f"{x},{y}" for x, y in pts) + f'"/>{dots}</g>')
        legend.append(f'<label><input type="checkbox" checked data-model="{html.escape(name)}">'
                      f'<span class="sw" style="border-color:{colour};border-top-style:'
                      f'{"solid" if not dash else "dashed"}"></span>{html.escape(name)}</label>')
    return (f'<div id="dm-curves"><div class="dm-legend">{"".join(legend)}</div>'
            f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" font-size="10" '
            f'role="img" aria-label="forgetting curves">{"".join(axes)}{"".join(groups)}</svg></div>')


def section(cohort, decimals: int) -> str:
    """The interactive section's body: heatmaps, curves, the hover box, data and script."""
    data = payload(cohort, decimals)
    label = figures.metric_label(cohort)
    blob = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")  # no early </script>
    return ("<p>Hover a cell for its value, seed std, rows scored (n_eval) and seeds. Rows = trained "
            "up to, columns = evaluated slice, time increasing up and to the right; one colour scale "
            "for all models.</p>" + heatmaps(cohort) + colour_bar(data, label)
            + "<h3>Forgetting curves</h3><p>Mean over training cutoffs of M[i, i + lag], band = seed "
              "std; untick a model to hide it.</p>" + curves_svg(cohort, label)
            + '<div id="dm-tip" class="dm-tip" role="status" hidden></div>'
            + f'<script type="application/json" id="dm-data">{blob}</script><script>{SCRIPT}</script>')
