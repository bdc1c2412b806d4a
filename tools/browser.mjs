// What every headless-Chromium script of the book shares (the browser tests, make pdf): the system
// Chromium through the pinned playwright-core, a fresh profile, and no host but 127.0.0.1.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

// sphinx-thebe declares this twice on every page: harmless, and the only error a page may raise.
export const HARMLESS = "Identifier 'THEBE_JS_URL' has already been declared";
const TYPES = {
  ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".json": "application/json",
  ".svg": "image/svg+xml", ".png": "image/png", ".woff": "font/woff", ".woff2": "font/woff2",
  ".ttf": "font/ttf", ".txt": "text/plain",
};

/** Serves the files under `root` on 127.0.0.1 at a free port; returns { origin, close }. */
export async function serveDirectory(root) {
  const server = http.createServer(async (request, response) => {
    const file = path.join(root, decodeURIComponent(new URL(request.url, "http://x").pathname));
    try {
      const body = await readFile(file);
      response.writeHead(200, { "content-type": TYPES[path.extname(file)] ?? "application/octet-stream" });
      response.end(body);
    } catch {
      response.writeHead(404).end();
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { origin: `http://127.0.0.1:${server.address().port}`, close: () => server.close() };
}

/**
 * Headless Chromium with a fresh profile; returns { context, close } (close removes the profile).
 * The browser is $LENGTHGEN_CHROMIUM, which make sets (the Makefile's CHROMIUM: the one place that finds it).
 */
export async function launchChromium(viewport = { width: 1280, height: 900 }) {
  const executablePath = process.env.LENGTHGEN_CHROMIUM;
  if (!executablePath) {
    throw new Error(
      "LENGTHGEN_CHROMIUM is not set: run this through make (make pdf, make test, make browser), which finds "
        + "the browser, or set it to a Chromium or Chrome binary",
    );
  }
  const userDataDir = await mkdtemp(path.join(os.tmpdir(), "lengthgen-chromium-"));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    viewport,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run",
    ],
  });
  context.setDefaultTimeout(30_000);
  const close = async () => {
    await context.close();
    await rm(userDataDir, { recursive: true, force: true });
  };
  return { context, close };
}

/** Lets `page` reach only `origin`; every other request is aborted and reported to `onBlocked(url)`. */
export async function onlyOrigin(page, origin, onBlocked) {
  await page.route("**/*", (route) => {
    const url = route.request().url();
    if (url === origin || url.startsWith(`${origin}/`)) return route.continue();
    onBlocked(url);
    return route.abort();
  });
}
