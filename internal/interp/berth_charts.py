"""berth's chart extraction: a matplotlib Figure as E2B's chart JSON.

Loaded by the code interpreter's Python kernels (server.py's kernel
setup) and registered as the IPython formatter of the MIME type
"e2b/chart", so a displayed figure's result carries "chart" beside its
PNG, as E2B's code interpreter answers. Written from the format E2B's SDK
reads (its Chart types):

- every chart: "type" (line, scatter, bar, pie, box_and_whisker,
  superchart, unknown), "title" (null when empty), "elements";
- line, scatter, bar, box_and_whisker also "x_label", "y_label",
  "x_unit", "y_unit" (the unit is what a label has in "(...)" after a
  space, or in "[...]");
- line and scatter also "x_ticks", "x_tick_labels", "x_scale" and the
  same for y; a scale is matplotlib's ("linear", "log", ...), or
  "datetime" for dates (their ticks then ISO strings), or "categorical"
  for strings; elements {"label", "points": [[x, y], ...]};
- bar: elements {"label", "group", "value"}; a horizontal chart swaps its
  axes' fields, so x is always the categories;
- pie: elements {"label", "angle" (degrees), "radius"};
- box_and_whisker: elements {"label", "min", "first_quartile", "median",
  "third_quartile", "max", "outliers"};
- superchart (a figure of several axes): its title is the figure's
  suptitle, its elements the chart of each axes.

A box's numbers are rounded to 10 significant digits and a pie's angles
to 3 decimals, so that they read as the data (a 90 % wedge is 324, not
matplotlib's 323.99999).
"""

import datetime
import re

UNIT = re.compile(r"\s\(([^)]*)\)|\[([^\]]*)\]")


def _round(v):
    return float("%.10g" % float(v))


def _plain(v):
    """v as JSON: numpy scalars to Python, dates to ISO strings."""
    import numpy
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    if isinstance(v, numpy.datetime64):
        return str(v.astype("datetime64[s]"))
    if isinstance(v, numpy.generic):
        return v.item()
    return v


def _converter(axis):
    get = getattr(axis, "get_converter", None)
    return get() if get is not None else getattr(axis, "converter", None)


def _is_dates(axis):
    from matplotlib import dates
    kinds = tuple(k for k in (getattr(dates, n, None) for n in (
        "DateConverter", "ConciseDateConverter", "_SwitchableDateConverter")) if isinstance(k, type))
    return isinstance(_converter(axis), kinds)


def _is_categories(axis):
    from matplotlib import category
    return isinstance(_converter(axis), category.StrCategoryConverter)


def _labels(axis, ticks):
    try:
        return [str(s) for s in axis.get_major_formatter().format_ticks(list(ticks))]
    except Exception:
        return [t.get_text() for t in axis.get_ticklabels()]


def _text(s):
    return s if s else None


def _unit(label):
    m = UNIT.search(label or "")
    if m is None:
        return None
    return m.group(1) if m.group(1) is not None else m.group(2)


def _base(kind, ax):
    return {"type": kind, "title": _text(ax.get_title()), "elements": []}


def _planar(kind, ax):
    c = _base(kind, ax)
    c["x_label"], c["y_label"] = _text(ax.get_xlabel()), _text(ax.get_ylabel())
    c["x_unit"], c["y_unit"] = _unit(c["x_label"]), _unit(c["y_label"])
    return c


def _swap(c):
    c["x_label"], c["y_label"] = c["y_label"], c["x_label"]
    c["x_unit"], c["y_unit"] = c["y_unit"], c["x_unit"]


def _scaled(kind, ax):
    from matplotlib import dates
    c = _planar(kind, ax)
    for name, axis, scale in (("x", ax.xaxis, ax.get_xscale()), ("y", ax.yaxis, ax.get_yscale())):
        ticks = list(axis.get_majorticklocs())
        c[name + "_tick_labels"] = _labels(axis, ticks)
        if _is_dates(axis):
            c[name + "_ticks"] = [dates.num2date(t).isoformat() for t in ticks]
            c[name + "_scale"] = "datetime"
        else:
            c[name + "_ticks"] = [float(t) for t in ticks]
            c[name + "_scale"] = "categorical" if _is_categories(axis) else scale
    return c


def _is_grid(line):
    x, y = line.get_xdata(), line.get_ydata()
    return len(x) == 2 and len(y) == 2 and (x[0] == x[1] or y[0] == y[1])


def _line(ax):
    c = _scaled("line", ax)
    for line in ax.get_lines():
        if _is_grid(line):
            continue
        label = line.get_label()
        if label.startswith("_child"):
            label = "Line " + label[len("_child"):]
        points = [[_plain(x), _plain(y)] for x, y in zip(line.get_xdata(), line.get_ydata())]
        c["elements"].append({"label": label, "points": points})
    return c


def _scatter(ax):
    c = _scaled("scatter", ax)
    for coll in ax.collections:
        points = [[_plain(x), _plain(y)] for x, y in coll.get_offsets()]
        c["elements"].append({"label": coll.get_label(), "points": points})
    return c


def _tick_label(axis, ticks, labels, at):
    for t, label in zip(ticks, labels):
        if abs(t - at) <= 1e-9 * max(1.0, abs(at)):
            return label
    return "%g" % at


def _bar(ax):
    c = _planar("bar", ax)
    rects = [r for cont in ax.containers for r in cont]
    # Horizontal bars (barh) share their left edge and differ in y.
    horizontal = len({r.get_x() for r in rects}) == 1 and len({r.get_y() for r in rects}) > 1
    axis = ax.yaxis if horizontal else ax.xaxis
    ticks = list(axis.get_majorticklocs())
    labels = _labels(axis, ticks)
    if horizontal:
        _swap(c)
    for cont in ax.containers:
        group = cont.get_label()
        if group.startswith("_container"):
            group = "Group " + group[len("_container"):]
        for r in cont:
            if horizontal:
                at, value = r.get_y() + r.get_height() / 2, r.get_width()
            else:
                at, value = r.get_x() + r.get_width() / 2, r.get_height()
            c["elements"].append({"label": _tick_label(axis, ticks, labels, at), "group": group, "value": _plain(value)})
    return c


def _pie(ax):
    from matplotlib.patches import Wedge
    c = _base("pie", ax)
    for w in ax.patches:
        if isinstance(w, Wedge):
            c["elements"].append({"label": w.get_label(), "angle": abs(round(w.theta2 - w.theta1, 3)), "radius": _plain(w.r)})
    return c


def _box(ax):
    from matplotlib.patches import PathPatch
    c = _planar("box_and_whisker", ax)
    spans = []  # each box: (lo, hi) across the categories, (q1, q3) along the values
    for p in ax.patches:
        if not isinstance(p, PathPatch):
            continue
        v = p.get_path().vertices
        spans.append(((v[:, 0].min(), v[:, 0].max()), (v[:, 1].min(), v[:, 1].max())))
    if not spans:
        return c
    # Vertical boxes (the default) share their width; horizontal ones
    # their height.
    horizontal = len({round(b[1][1] - b[1][0], 9) for b in spans}) == 1 and \
        len({round(b[0][1] - b[0][0], 9) for b in spans}) > 1
    if horizontal:
        spans = [(b[1], b[0]) for b in spans]
        _swap(c)
    axis = ax.yaxis if horizontal else ax.xaxis
    ticks = list(axis.get_majorticklocs())
    labels = _labels(axis, ticks)
    boxes = []
    for (lo, hi), (q1, q3) in spans:
        boxes.append({"label": _tick_label(axis, ticks, labels, (lo + hi) / 2), "min": _round(q1),
                      "first_quartile": _round(q1), "median": _round(q1), "third_quartile": _round(q3),
                      "max": _round(q3), "outliers": [], "_span": (lo, hi)})
    for line in ax.lines:
        xs, ys = list(line.get_xdata()), list(line.get_ydata())
        if horizontal:
            xs, ys = ys, xs
        if not xs:
            continue
        box = next((b for b in boxes if b["_span"][0] - 1e-9 <= float(min(xs)) and float(max(xs)) <= b["_span"][1] + 1e-9), None)
        if box is None:
            continue
        q1, q3 = box["first_quartile"], box["third_quartile"]
        if line.get_linestyle() in ("None", "", " ", "none"):
            box["outliers"].extend(_round(y) for y in ys)  # fliers: markers only
        elif len(xs) == 2 and xs[0] == xs[1]:  # a whisker, along the values
            lo_y, hi_y = _round(min(ys)), _round(max(ys))
            if hi_y <= q1:
                box["min"] = lo_y
            elif lo_y >= q3:
                box["max"] = hi_y
        elif len(ys) == 2 and ys[0] == ys[1] and abs((max(xs) - min(xs)) - (box["_span"][1] - box["_span"][0])) < 1e-9:
            box["median"] = _round(ys[0])  # the line across the whole box
    for b in boxes:
        del b["_span"]
    c["elements"] = boxes
    return c


def _kind(ax):
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge
    from matplotlib.text import Text
    children = getattr(ax, "_children", None)
    if children is None:
        children = list(ax.lines) + list(ax.collections) + list(ax.patches) + list(ax.artists)
    objs = [o for o in children if not isinstance(o, Text)]
    if all(isinstance(o, Line2D) for o in objs):
        return _line
    if all(isinstance(o, (PathPatch, Line2D)) for o in objs):
        return _box
    objs = [o for o in objs if not (isinstance(o, Line2D) and _is_grid(o))]
    if all(isinstance(o, PathCollection) for o in objs):
        return _scatter
    if all(isinstance(o, Wedge) for o in objs):
        return _pie
    if all(isinstance(o, Rectangle) for o in objs):
        return _bar
    return lambda ax: _base("unknown", ax)


def chart_of_axes(ax):
    return _kind(ax)(ax)


def chart(figure):
    """figure's chart, or None for a figure with nothing drawn."""
    axes = figure.get_axes()
    if not axes or not any(ax.has_data() for ax in axes):
        return None
    if len(axes) == 1:
        return chart_of_axes(axes[0])
    suptitle = figure._suptitle.get_text() if getattr(figure, "_suptitle", None) is not None else ""
    return {"type": "superchart", "title": _text(suptitle), "elements": [chart_of_axes(ax) for ax in axes]}
