//! A plotters chart in f64 values with explicit ticks: the frame (mesh, labels)
//! and the few elements every chart kind is drawn with.
//!
//! The axes are integers underneath: plotters binds custom ticks and labels only
//! to axes with default formatting, which f64 lacks. Using one coordinate type for
//! every kind also keeps plotters' generic code in the wasm once.

use plotters::{
    chart::{ChartBuilder, ChartContext},
    coord::{Shift, cartesian::Cartesian2d, combinators::WithKeyPoints, types::RangedCoordi64},
    drawing::DrawingArea,
    element::{Circle, PathElement, Polygon, Rectangle, Text},
    prelude::{BindKeyPoints, DrawingBackend},
    style::{Color, ShapeStyle, TextStyle},
};

use super::{DrawError, Look, axes::Axes};

type Axis = WithKeyPoints<RangedCoordi64>;

/// Chart units per unit of value on the integer axes.
const FIXED: f64 = 10_000.0;

fn fixed(v: f64) -> i64 {
    (v * FIXED).round() as i64
}

fn at((x, y): (f64, f64)) -> (i64, i64) {
    (fixed(x), fixed(y))
}

/// A chart drawn in f64 values; every element goes through one of these few calls.
pub struct Plot<'a, DB: DrawingBackend>(ChartContext<'a, DB, Cartesian2d<Axis, Axis>>);

impl<'a, DB: DrawingBackend + 'a> Plot<'a, DB> {
    /// Draws the axes, grid and labels of `axes` on `area`.
    pub fn frame(area: &'a DrawingArea<DB, Shift>, look: &Look, axes: &Axes<'_>) -> Result<Self, DrawError> {
        let mut chart = ChartBuilder::on(area)
            .margin(look.px(10.0))
            .margin_left(look.px(6.0))
            .margin_right(look.px(16.0))
            .x_label_area_size(look.px(if axes.x_desc.is_empty() { 24.0 } else { 38.0 }))
            .y_label_area_size(look.px(axes.y_area + if axes.y_desc.is_empty() { 0.0 } else { 14.0 }))
            .build_cartesian_2d(
                (fixed(axes.x.start)..fixed(axes.x.end))
                    .with_key_points(axes.x_ticks.iter().map(|&t| fixed(t)).collect()),
                (fixed(axes.y.start)..fixed(axes.y.end))
                    .with_key_points(axes.y_ticks.iter().map(|&t| fixed(t)).collect()),
            )?;
        let palette = &look.palette;
        let label = look.font(11.0).color(&palette.text);
        let x_label = |x: &i64| (axes.x_label)(*x as f64 / FIXED);
        let y_label = |y: &i64| (axes.y_label)(*y as f64 / FIXED);
        let mut mesh = chart.configure_mesh();
        mesh.x_label_formatter(&x_label)
            .y_label_formatter(&y_label)
            .label_style(label.clone())
            .axis_desc_style(label)
            .axis_style(ShapeStyle::from(palette.axis).stroke_width(look.px(1.0)))
            .bold_line_style(ShapeStyle::from(palette.grid.mix(0.45)).stroke_width(look.px(1.0)))
            .light_line_style(ShapeStyle::from(palette.grid.mix(0.0)))
            .set_all_tick_mark_size(look.px(3.0));
        if !axes.x_desc.is_empty() {
            mesh.x_desc(axes.x_desc);
        }
        if !axes.y_desc.is_empty() {
            mesh.y_desc(axes.y_desc);
        }
        mesh.draw()?;
        Ok(Self(chart))
    }

    pub fn path(&mut self, points: &[(f64, f64)], style: ShapeStyle) -> Result<(), DrawError> {
        let points: Vec<(i64, i64)> = points.iter().copied().map(at).collect();
        self.0.draw_series(std::iter::once(PathElement::new(points, style)))?;
        Ok(())
    }

    pub fn polygon(&mut self, points: &[(f64, f64)], style: ShapeStyle) -> Result<(), DrawError> {
        let points: Vec<(i64, i64)> = points.iter().copied().map(at).collect();
        self.0.draw_series(std::iter::once(Polygon::new(points, style)))?;
        Ok(())
    }

    pub fn rect(&mut self, from: (f64, f64), to: (f64, f64), style: ShapeStyle) -> Result<(), DrawError> {
        self.0.draw_series(std::iter::once(Rectangle::new([at(from), at(to)], style)))?;
        Ok(())
    }

    pub fn dots(&mut self, points: &[(f64, f64)], radius: u32, style: ShapeStyle) -> Result<(), DrawError> {
        self.0.draw_series(points.iter().map(|&p| Circle::new(at(p), radius, style)))?;
        Ok(())
    }

    pub fn text(&mut self, text: String, point: (f64, f64), style: &TextStyle<'_>) -> Result<(), DrawError> {
        self.0.draw_series(std::iter::once(Text::new(text, at(point), style.clone())))?;
        Ok(())
    }
}
