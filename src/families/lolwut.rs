//! LOLWUT [VERSION v] [args...]: Redis's generative-art command. Without
//! a version (or for one with no art of its own) it answers the version
//! line, as Redis 7.0 does; VERSION 5 draws a "Schotter" plot of squares
//! growing more disordered row by row, in braille dots; VERSION 6 draws a
//! night skyline in four shades of terminal colour. The drawings are
//! cairn's own and random, as Redis's are; the captions are Redis's.

use rand::Rng;

use crate::command::args::{error, is, Args, NOT_INTEGER};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::util::num::parse_i64;

/// The version line every drawing ends with.
fn version_line() -> String {
    format!("Redis ver. {}\n", super::server::REDIS_VERSION)
}

/// LOLWUT
pub fn lolwut(_s: &mut Session, a: Args) -> Action {
    let mut version = 7;
    let mut rest = a.from(1);
    if rest.len() >= 2 && is(&rest[0], "version") {
        match parse_i64(&rest[1]) {
            Some(v) => version = v,
            None => return error(NOT_INTEGER).into(),
        }
        rest = &rest[2..];
    }
    // The drawing's own arguments, all integers, each with a default.
    let mut nums = Vec::with_capacity(rest.len());
    for arg in rest {
        match parse_i64(arg) {
            Some(n) => nums.push(n),
            None if version == 5 || version == 6 => return error(NOT_INTEGER).into(),
            None => {}
        }
    }
    let arg =
        |i: usize, default: i64, max: i64| nums.get(i).copied().unwrap_or(default).clamp(1, max);
    let text = match version {
        5 => format!(
            "{}\nGeorg Nees - schotter, plotter on paper, 1968. {}",
            schotter(arg(0, 66, 1000), arg(1, 8, 200), arg(2, 12, 200)),
            version_line()
        ),
        6 => format!(
            "{}\nDedicated to the 8 bit game developers of past and present.\nOriginal 8 bit image from Plaguemon by hikikomori. {}",
            skyline(arg(0, 80, 1000), arg(1, 20, 1000)),
            version_line()
        ),
        _ => version_line(),
    };
    Reply::Verbatim(text).into()
}

/// A canvas of on/off pixels, shown two by four per braille character.
struct Canvas {
    width: usize,
    height: usize,
    pixels: Vec<bool>,
}

impl Canvas {
    fn new(width: usize, height: usize) -> Canvas {
        Canvas {
            width,
            height,
            pixels: vec![false; width * height],
        }
    }

    fn set(&mut self, x: i64, y: i64) {
        if (0..self.width as i64).contains(&x) && (0..self.height as i64).contains(&y) {
            self.pixels[y as usize * self.width + x as usize] = true;
        }
    }

    /// A straight line between two points, one pixel per step along its
    /// longer axis.
    fn line(&mut self, (x0, y0): (f64, f64), (x1, y1): (f64, f64)) {
        let steps = (x1 - x0).abs().max((y1 - y0).abs()).ceil().max(1.0) as i64;
        for i in 0..=steps {
            let t = i as f64 / steps as f64;
            let x = x0 + (x1 - x0) * t;
            let y = y0 + (y1 - y0) * t;
            self.set(x.round() as i64, y.round() as i64);
        }
    }

    /// Rows of braille characters, each ending in a newline. A braille
    /// cell's dots are numbered down the left column (bits 0-2, then 6)
    /// and down the right one (bits 3-5, then 7).
    fn braille(&self) -> String {
        const BITS: [[u32; 4]; 2] = [[0x01, 0x02, 0x04, 0x40], [0x08, 0x10, 0x20, 0x80]];
        let mut out = String::new();
        for cy in (0..self.height).step_by(4) {
            for cx in (0..self.width).step_by(2) {
                let mut code = 0;
                for (dx, column) in BITS.iter().enumerate() {
                    for (dy, bit) in column.iter().enumerate() {
                        let (x, y) = (cx + dx, cy + dy);
                        if x < self.width && y < self.height && self.pixels[y * self.width + x] {
                            code |= bit;
                        }
                    }
                }
                out.push(char::from_u32(0x2800 + code).unwrap_or(' '));
            }
            out.push('\n');
        }
        out
    }
}

/// Squares in a grid, each turned and shifted at random by an amount that
/// grows from the first row to the last.
fn schotter(cols: i64, per_row: i64, per_col: i64) -> String {
    let width = cols as usize * 2;
    let side = (width as f64 / (per_row + 2) as f64).max(1.0);
    let height = (side * (per_col + 2) as f64).ceil() as usize;
    let mut canvas = Canvas::new(width, height);
    let mut rng = rand::thread_rng();
    for row in 0..per_col {
        let disorder = row as f64 / per_col as f64;
        for col in 0..per_row {
            let cx = side * (col as f64 + 1.5) + rng.gen_range(-1.0..=1.0) * disorder * side / 3.0;
            let cy = side * (row as f64 + 1.5) + rng.gen_range(-1.0..=1.0) * disorder * side / 3.0;
            let angle = rng.gen_range(-1.0..=1.0) * disorder * std::f64::consts::FRAC_PI_4;
            let half = side / 2.0 - 1.0;
            let corner = |k: usize| {
                let a =
                    angle + std::f64::consts::FRAC_PI_4 + k as f64 * std::f64::consts::FRAC_PI_2;
                let r = half * std::f64::consts::SQRT_2;
                (cx + r * a.cos(), cy + r * a.sin())
            };
            for k in 0..4 {
                canvas.line(corner(k), corner((k + 1) % 4));
            }
        }
    }
    canvas.braille()
}

/// Buildings of random widths and heights against a dark sky, with lit
/// windows, each cell one coloured space.
fn skyline(cols: i64, rows: i64) -> String {
    // Foreground;background pairs of the four shades: black, dark grey,
    // light grey, white.
    const SHADES: [&str; 4] = ["0;30;40", "0;90;100", "0;37;47", "0;97;107"];
    let (cols, rows) = (cols as usize, rows as usize);
    let mut grid = vec![0u8; cols * rows];
    let mut rng = rand::thread_rng();
    let mut x = 0;
    while x < cols {
        let w = rng.gen_range(3..=8).min(cols - x);
        let h = rng.gen_range(rows / 4..=rows.saturating_sub(2).max(rows / 4));
        let shade = rng.gen_range(1..=2);
        for dx in x..x + w {
            for y in rows - h..rows {
                // Windows every other cell, some lit.
                let window =
                    dx > x && dx + 1 < x + w && (y - (rows - h)) % 2 == 1 && (dx - x) % 2 == 1;
                grid[y * cols + dx] = if window && rng.gen_bool(0.4) {
                    3
                } else {
                    shade
                };
            }
        }
        x += w + rng.gen_range(0..=1);
    }
    let mut out = String::new();
    for row in grid.chunks(cols) {
        for &cell in row {
            out.push_str(&format!("\x1b[{}m \x1b[0m", SHADES[cell as usize]));
        }
        out.push('\n');
    }
    out
}
