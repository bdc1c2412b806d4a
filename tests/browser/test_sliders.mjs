// Headless check of the built book, run by `make test`:
//   node tests/browser/test_sliders.mjs <built html dir> <minimum number of slider figures>
// Serves the book on 127.0.0.1 and opens every page in Chromium. Fails if any page requests
// another host or a missing local file, raises a script error (other than sphinx-thebe's known
// harmless one), leaves a stored widget unrendered, maps a widget module outside vendor/, or has a
// slider figure whose controls (one per grid axis: a range input or a drop-down, viz/sliders.py)
// do not redraw it: its range inputs are moved from the keyboard (focus, ArrowRight) and then to
// their last value, its drop-downs set to their last option, and after each move the plot's data
// and drawing must change and a range must show and announce its value; or if the book holds fewer
// slider figures than the minimum; or if axe-core (the accessibility checker) finds a serious or
// critical problem on any page (THEME below lists the few findings left to the theme, with the
// reason). Saves a screenshot of every slider figure, after the moves, to _build/browser/, and
// axe's findings of every impact, page by page, to _build/browser/axe.json.
import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { AxeBuilder } from "@axe-core/playwright";
import { HARMLESS, launchChromium, onlyOrigin, serveDirectory } from "../../tools/browser.mjs";

if (process.argv.length !== 4 || !Number.isInteger(Number(process.argv[3]))) {
  throw new Error("usage: node tests/browser/test_sliders.mjs <built html dir> <minimum slider figures>");
}
const [root, minimum] = [path.resolve(process.argv[2]), Number(process.argv[3])];
const SHOTS = path.resolve(root, "..", "browser");
const failures = [];
// axe's impacts that fail the test; moderate and minor findings are only counted.
const FAILING = new Set(["serious", "critical"]);
// Findings left to the theme (sphinx-book-theme on pydata-sphinx-theme), by rule and by the class
// of the element: its header buttons carry an aria-label ("Search", "Color mode") that differs
// from their visible text (the search button's "Search Ctrl+K", the colour switch's icon text),
// written by the theme's templates and scripts, which no configuration or CSS changes.
const THEME = {
  "label-content-name-mismatch": ["search-button-field", "theme-switch-button"],
};
const fromTheme = (rule, node) => {
  const opening = node.html.slice(0, node.html.indexOf(">") + 1);
  const classes = (/class="([^"]*)"/.exec(opening)?.[1] ?? "").split(/\s+/);
  return (THEME[rule] ?? []).some((name) => classes.includes(name));
};
const fail = (page, message) => failures.push(`${page}: ${message}`);

async function htmlPages(dir) {
  const pages = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory() && !entry.name.startsWith("_") && entry.name !== "vendor") {
      pages.push(...(await htmlPages(full)));
    } else if (entry.isFile() && entry.name.endsWith(".html")) {
      pages.push(path.relative(root, full).split(path.sep).join("/"));
    }
  }
  return pages.sort();
}

const server = await serveDirectory(root);
const origin = server.origin;
const browser = await launchChromium();
const context = browser.context;
await mkdir(SHOTS, { recursive: true });

// The data and the drawn plot of a slider figure's plotly graph div.
const snapshot = (figure) => {
  const gd = figure.querySelector(".js-plotly-plot");
  return { data: JSON.stringify(gd.data), svg: gd.querySelector(".main-svg").innerHTML };
};

// Runs `move` on a figure's control, then waits until the figure changed (plotly redraws
// asynchronously; under load this takes longer) and fails unless both its data and drawing did.
async function changes(page, name, figure, what, move) {
  const before = await figure.evaluate(snapshot);
  await move();
  let after = await figure.evaluate(snapshot);
  for (let tries = 0; tries < 40 && (after.data === before.data || after.svg === before.svg); tries++) {
    await page.waitForTimeout(250);
    after = await figure.evaluate(snapshot);
  }
  if (after.data === before.data) fail(name, `${what} did not change the figure's data`);
  if (after.svg === before.svg) fail(name, `${what} did not change the drawn figure`);
}

// A range shows its grid value (the <output> beside it) and announces it (aria-valuetext).
async function rangeShows(name, range, what) {
  const id = await range.getAttribute("id");
  const [shown, announced] = await Promise.all([
    range.page().locator(`[id="${id}-value"]`).textContent(),
    range.getAttribute("aria-valuetext"),
  ]);
  if (shown !== announced) fail(name, `${what}: the range shows ${shown} but announces ${announced}`);
  return shown;
}

async function driveEveryControl(page, name, figure) {
  await figure.locator(".js-plotly-plot .main-svg").first().waitFor();
  const ranges = figure.locator('input[type="range"]');
  const selects = figure.locator("select");
  if ((await ranges.count()) + (await selects.count()) === 0) fail(name, "slider figure has no controls");
  for (let i = 0; i < (await ranges.count()); i++) {
    const range = ranges.nth(i);
    await range.scrollIntoViewIfNeeded();
    const first = await rangeShows(name, range, "at first");
    await changes(page, name, figure, `range ${i}: ArrowRight`, async () => {
      await range.focus();
      await page.keyboard.press("ArrowRight");
    });
    if ((await rangeShows(name, range, "after ArrowRight")) === first) fail(name, `range ${i}: its value did not move`);
    const last = await range.getAttribute("max");
    await changes(page, name, figure, `range ${i}: moved to its end`, () => range.fill(last));
    await rangeShows(name, range, "at its end");
  }
  for (let i = 0; i < (await selects.count()); i++) {
    const select = selects.nth(i);
    const options = await select.locator("option").evaluateAll((nodes) => nodes.map((node) => node.value));
    await changes(page, name, figure, `drop-down ${i}: last option`, () => select.selectOption(options.at(-1)));
  }
  await figure.screenshot({ path: path.join(SHOTS, `${name}.png`) });
}

let sliderCount = 0;
const findings = [];
let widgetCount = 0;
let external = 0;
// The widget manager's modules, each defined by name in embed-amd.js: each loads its icon fonts from
// the folder require.js maps its name to, so every one must map into vendor/ (book/widgets-config.js).
// Which module's fonts the browser asks for first is a race: an unmapped one 404s only sometimes.
const MANAGER = path.join(root, "vendor", "html-manager", "embed-amd.js");
const MODULES = [...(await readFile(MANAGER, "utf8")).matchAll(/define\("(@jupyter-widgets\/[^"]+)"/g)].map((m) => m[1]);
if (MODULES.length === 0) failures.push(`${MANAGER}: no named widget modules found`);
for (const url of await htmlPages(root)) {
  const page = await context.newPage();
  page.on("pageerror", (error) => error.message.includes(HARMLESS) || fail(url, `script error: ${error.message}`));
  page.on("response", (r) => r.status() >= 400 && fail(url, `HTTP ${r.status()} for ${r.url()}`));
  await onlyOrigin(page, origin, (blocked) => {
    external += 1;
    fail(url, `requested another host: ${blocked}`);
  });
  await page.goto(`${origin}/${url}`, { waitUntil: "load" });
  if (/<meta http-equiv="refresh"/i.test(await readFile(path.join(root, url), "utf8"))) {
    await page.waitForURL((target) => target.href !== `${origin}/${url}`);  // a redirect: it must lead on
    await page.waitForLoadState("load");
  }

  const views = await page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count();
  if (views > 0) {
    try {
      await page.waitForFunction((n) => document.querySelectorAll(".widget-subarea > *").length >= n, views);
    } catch {
      fail(url, `${views} stored widget views, not all rendered`);
    }
    const where = await page.evaluate(
      (names) => names.map((name) => new URL(require.toUrl(name), location.href).pathname),
      MODULES,
    );
    where.forEach((module, i) => {
      const folder = module.slice(0, module.lastIndexOf("/") + 1);  // where its fonts are fetched from
      if (folder !== "/vendor/html-manager/") fail(url, `${MODULES[i]} maps to ${module}: its icon fonts would load from ${folder}`);
    });
  }
  const figures = page.locator("[data-lengthgen-slider]");
  const names = await figures.evaluateAll((nodes) => nodes.map((node) => node.dataset.lengthgenSlider));
  if (new Set(names).size !== names.length) fail(url, `slider figure names repeat: ${names}`);
  for (let i = 0; i < names.length; i++) {
    try {
      await driveEveryControl(page, names[i], figures.nth(i));
    } catch (error) {
      fail(names[i], `slider figure did not render or its controls could not be used: ${error.message}`);
    }
  }
  // axe on the page as the reader sees it: widgets rendered, slider figures drawn (and moved).
  const axe = await new AxeBuilder({ page }).analyze();
  let found = 0;
  for (const v of axe.violations) {
    const nodes = v.nodes.filter((node) => !fromTheme(v.id, node));
    found += nodes.length;
    if (nodes.length === 0) continue;
    findings.push({ page: url, rule: v.id, impact: v.impact, help: v.help, targets: nodes.map((n) => n.target.join(" ")) });
    if (FAILING.has(v.impact)) {
      const where = nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", ");
      fail(url, `axe ${v.impact} ${v.id} (${v.help}) on ${nodes.length} element(s): ${where}`);
    }
  }
  console.log(`${url}: ${names.length} slider figure(s), ${views} widget view(s), ${found} axe finding(s)`);
  sliderCount += names.length;
  widgetCount += views;
  await page.close();
}
await browser.close();
server.close();

await writeFile(path.join(SHOTS, "axe.json"), `${JSON.stringify(findings, null, 1)}\n`);
const tally = {};
for (const f of findings) tally[`${f.impact} ${f.rule}`] = (tally[`${f.impact} ${f.rule}`] ?? 0) + f.targets.length;
console.log(`axe findings (elements, all pages): ${JSON.stringify(tally)}`);
if (sliderCount < minimum) failures.push(`${sliderCount} slider figure(s) in the book, expected at least ${minimum}`);
console.log(`${sliderCount} slider figure(s), ${widgetCount} widget view(s), ${external} external request(s) aborted`);
if (failures.length) {
  console.log(`browser test FAILED:\n  ${failures.join("\n  ")}`);
  process.exitCode = 1;
} else {
  console.log(`browser test passed; screenshots in ${SHOTS}`);
}
