# Convergence plots in R: base graphics always, ggplot2 when it is installed.

#' Plot training curves of a comparison or of one training run
#'
#' For a [kd_compare()] result: the loss of each logged step's own batch
#' (not Keras' running epoch mean; x axis in epochs), validation accuracy per
#' epoch, one line per run (dashed for N > 1 replicas, so a curve lying
#' exactly on the 1-replica one stays visible), and, with base graphics, the
#' steady-state samples per second of each run (first epoch left out), with a
#' note when the replicas are virtual CPU devices sharing the same cores. For a
#' [kd_train()] result: training and validation loss and accuracy per
#' epoch.
#'
#' @param x A [kd_compare()] or [kd_train()] result (a data.frame with the
#'   same columns works too).
#' @param file If not `NULL`, the path of a PNG file to write (its folder
#'   must exist); otherwise the plot goes to the current graphics device.
#' @param backend `"auto"` (ggplot2 if installed, else base graphics),
#'   `"base"` or `"ggplot2"`.
#' @param width,height,res Size in pixels and resolution (pixels per inch)
#'   of the PNG file.
#' @returns With base graphics, `file` (if given) or `x`, invisibly. With
#'   ggplot2, the ggplot object (invisibly when written to `file`).
#' @family training
#' @export
#' @examples
#' \donttest{
#' if (kd_available()) {
#'   comparison <- kd_compare(replicas = c(1, 2), epochs = 2, data = "sample")
#'   png_file <- kd_plot_convergence(comparison, backend = "base",
#'                                   file = tempfile(fileext = ".png"))
#'   file.size(png_file)
#' }
#' }
kd_plot_convergence <- function(x, file = NULL, backend = c("auto", "base", "ggplot2"),
                                width = 1500, height = 480, res = 110) {
  backend <- match.arg(backend)
  collect_python_garbage()
  panels <- convergence_panels(x)
  if (!is.null(file)) {
    file <- as_path(file, "file")
    if (!dir.exists(dirname(file))) {
      kd_abort(sprintf("cannot write %s: its folder does not exist", file))
    }
    width <- as_size(width, "width")
    height <- as_size(height, "height")
    res <- as_size(res, "res")
  }
  has_ggplot2 <- requireNamespace("ggplot2", quietly = TRUE)
  if (backend == "ggplot2" && !has_ggplot2) {
    kd_abort(paste("backend = \"ggplot2\" needs the ggplot2 package:",
                   "install.packages(\"ggplot2\") (Debian: apt-get install r-cran-ggplot2),",
                   "or use backend = \"base\"."))
  }
  if (backend == "ggplot2" || (backend == "auto" && has_ggplot2)) {
    plot <- convergence_ggplot(panels)
    if (is.null(file)) {
      return(plot)
    }
    grDevices::png(file, width = width, height = height, res = res)
    on.exit(grDevices::dev.off(), add = TRUE)
    print(plot)
    return(invisible(plot))
  }
  if (!is.null(file)) {
    grDevices::png(file, width = width, height = height, res = res)
    on.exit(grDevices::dev.off(), add = TRUE)
  }
  convergence_base(panels)
  invisible(if (is.null(file)) x else file)
}

# Long data for the plots: a list of panels, each with a title, axis labels and a
# data.frame of points (series, x, y, dashed); "bars" for throughput.
convergence_panels <- function(x) {
  if (!is.data.frame(x)) {
    kd_abort(sprintf("`x` must be the result of kd_compare() or kd_train(). Received: %s",
                     deparse_short(x)))
  }
  if (all(c("run", "replicas", "level", "index", "metric", "value") %in% names(x))) {
    return(comparison_panels(x))
  }
  if (all(c("epoch", "loss") %in% names(x))) {
    return(training_panels(x))
  }
  kd_abort(paste("`x` must be the result of kd_compare() (columns run, replicas, level, index,",
                 "metric, value) or kd_train() (columns epoch, loss, ...). Received columns:",
                 paste(names(x), collapse = ", ")))
}

comparison_panels <- function(x) {
  runs <- unique(x$run)
  labels <- run_labels(x, runs)
  dashed <- vapply(runs, function(run) any(x$replicas[x$run == run] > 1L), logical(1))
  series <- function(level, metric, as_epochs) {
    parts <- lapply(runs, function(run) {
      rows <- x[x$run == run & x$level == level & x$metric == metric, , drop = FALSE]
      position <- rows$index
      if (as_epochs && nrow(rows) > 0L) {
        # Steps in epochs elapsed, so runs with different global batches share an axis.
        epochs <- max(c(1L, x$index[x$run == run & x$level == "epoch"]))
        position <- rows$index * epochs / max(rows$index)
      }
      data.frame(series = rep(labels[[run]], nrow(rows)), x = position, y = rows$value,
                 dashed = rep(dashed[[run]], nrow(rows)), stringsAsFactors = FALSE)
    })
    do.call(rbind, parts)
  }
  # Each step's own batch loss when logged (not Keras' running epoch mean, which drops at every
  # epoch boundary); older records have only the running mean.
  step_metric <- if (any(x$level == "step" & x$metric == "batch_loss")) "batch_loss" else "loss"
  loss_level <- if (any(x$level == "step" & x$metric == step_metric)) "step" else "epoch"
  loss_label <- if (loss_level == "step" && step_metric == "batch_loss") {
    "loss of each step's batch"
  } else if (loss_level == "step") {
    "loss (running epoch mean)"
  } else {
    "loss (epoch mean)"
  }
  panels <- list(
    list(title = "Training loss per step", xlab = "epoch", ylab = loss_label,
         points = series(loss_level, if (loss_level == "step") step_metric else "loss", loss_level == "step"),
         markers = FALSE),
    list(title = "Validation accuracy", xlab = "epoch", ylab = "accuracy",
         points = series("epoch", "val_sparse_categorical_accuracy", FALSE), markers = TRUE,
         legend = "bottomright")
  )
  runs_summary <- attr(x, "runs")
  speed <- runs_summary$steady_samples_per_s %||% runs_summary$samples_per_s
  if (!is.null(speed) && any(!is.na(speed))) {
    steady <- !is.null(runs_summary$steady_samples_per_s)
    panels[[3]] <- list(title = if (steady) "Steady-state throughput (after epoch 1)" else "Throughput",
                        xlab = "samples/s", ylab = "",
                        bars = stats_named(speed, unname(labels[runs_summary$run])),
                        note = if (isTRUE(attr(x, "virtual_cpus"))) cpu_replicas_note else NULL)
  }
  panels
}

cpu_replicas_note <- "virtual CPU replicas share the same cores:\nmore replicas cannot be faster here"

# Legend labels such as "2 replicas, batch 64" (with the mode when a comparison has several).
run_labels <- function(x, runs) {
  several_modes <- length(unique(x$mode %||% "")) > 1L
  labels <- vapply(runs, function(run) {
    rows <- x[x$run == run, , drop = FALSE]
    replicas <- rows$replicas[1]
    label <- sprintf("%d replica%s", replicas, if (replicas > 1L) "s" else "")
    if (!is.null(rows$global_batch_size)) {
      label <- sprintf("%s, batch %d", label, rows$global_batch_size[1])
    }
    if (several_modes) paste0(rows$mode[1], ": ", label) else label
  }, character(1))
  stats_named(labels, runs)
}

training_panels <- function(x) {
  pairs <- list(
    list(title = "Loss", ylab = "loss", legend = "topright", metrics = c(train = "loss", validation = "val_loss")),
    list(title = "Accuracy", ylab = "accuracy", legend = "bottomright",
         metrics = c(train = "sparse_categorical_accuracy", validation = "val_sparse_categorical_accuracy"))
  )
  replicas <- attr(x, "replicas")
  suffix <- if (is.null(replicas)) "" else sprintf(" (%d replica%s)", replicas, if (replicas > 1L) "s" else "")
  lapply(pairs, function(pair) {
    present <- pair$metrics[pair$metrics %in% names(x)]
    points <- do.call(rbind, lapply(names(present), function(label) {
      data.frame(series = rep(label, nrow(x)), x = x$epoch, y = x[[present[[label]]]],
                 dashed = rep(label == "validation", nrow(x)), stringsAsFactors = FALSE)
    }))
    list(title = paste0(pair$title, suffix), xlab = "epoch", ylab = pair$ylab, points = points,
         markers = TRUE, legend = pair$legend)
  })
}

stats_named <- function(values, names) {
  names(values) <- names
  values
}

convergence_base <- function(panels) {
  # Room under every panel for the throughput note, so that it sits below the axis label, not on it.
  noted <- any(vapply(panels, function(panel) !is.null(panel$note), logical(1)))
  bottom <- if (noted) 6.8 else 4.2
  old <- graphics::par(mfrow = c(1L, length(panels)), mar = c(bottom, 4.2, 2.5, 1))
  on.exit(graphics::par(old), add = TRUE)
  for (panel in panels) {
    if (!is.null(panel$bars)) {
      bars <- rev(panel$bars)
      # A left margin as wide as the longest bar name, so that no name reaches into the panel beside it.
      names_width <- max(graphics::strwidth(names(bars), units = "inches", cex = 0.8), 0, na.rm = TRUE)
      old_mar <- graphics::par(mar = c(bottom, max(4, names_width / graphics::par("csi") + 1), 2.5, 1))
      # The title at most as wide as the plot (the names' margin may leave it little room).
      title_width <- graphics::strwidth(panel$title, units = "inches", cex = graphics::par("cex.main"),
                                        font = 2L)
      title_cex <- graphics::par("cex.main") * min(1, graphics::par("pin")[1] / title_width)
      centres <- graphics::barplot(bars, horiz = TRUE, las = 1, col = "grey60", main = panel$title,
                                   cex.main = title_cex,
                                   xlab = panel$xlab, cex.names = 0.8, xlim = c(0, 1.15 * max(bars, na.rm = TRUE)))
      graphics::text(bars, centres, labels = sprintf("%.0f", bars), pos = 4L, cex = 0.8)
      if (!is.null(panel$note)) {
        graphics::mtext(panel$note, side = 1L, line = 3.9, padj = 1, cex = 0.7, col = "firebrick")
      }
      graphics::par(old_mar)
      next
    }
    points <- panel$points
    series <- unique(points$series)
    colours <- grDevices::hcl.colors(max(2L, length(series)), "Dark 3")[seq_along(series)]
    finite <- is.finite(points$x) & is.finite(points$y)
    if (!any(finite)) {
      graphics::plot.new()
      graphics::title(main = panel$title)
      next
    }
    graphics::plot(range(floor(min(points$x[finite])), points$x[finite]), range(points$y[finite]),
                   type = "n", main = panel$title,
                   xlab = panel$xlab, ylab = panel$ylab, xaxt = "n")
    # Whole epochs on the x axis.
    ticks <- unique(round(pretty(points$x[finite])))
    graphics::axis(1L, at = ticks[ticks >= floor(min(points$x[finite])) & ticks <= max(points$x[finite])])
    graphics::grid(nx = NA, ny = NULL)
    graphics::abline(v = ticks, col = "lightgray", lty = "dotted")
    # A series that coincides with an earlier one goes over it, narrower (smaller markers), so that the
    # colours of both show, and the legend names the series it lies on.
    matches <- coinciding_series(points)
    grouped <- !is.na(matches$leader) | matches$series %in% matches$leader
    step <- pmin(matches$rank, 3L) + 1L
    lwd <- ifelse(grouped, c(3.2, 1.9, 0.8, 0.5)[step], 1)
    cex <- ifelse(grouped, c(1.6, 1.1, 0.6, 0.4)[step], 0.8)
    pch <- ifelse(grouped, c(16L, 15L, 18L, 16L)[step], 16L)
    lty <- vapply(series, function(s) if (points$dashed[points$series == s][1]) 2L else 1L, integer(1))
    for (i in seq_along(series)) {
      rows <- points[points$series == series[[i]], , drop = FALSE]
      graphics::lines(rows$x, rows$y, col = colours[[i]], lty = lty[[i]], lwd = lwd[[i]],
                      type = if (panel$markers) "o" else "l", pch = pch[[i]], cex = cex[[i]])
    }
    # The note of a coinciding series is a legend line of its own, under the series, with no symbol.
    notes <- coinciding_notes(matches)
    keep <- c(rbind(TRUE, !is.na(notes)))
    entry <- rep(seq_along(series), each = 2L)[keep]
    symbol <- rep(c(TRUE, FALSE), length(series))[keep]
    graphics::legend(panel$legend %||% "topright", legend = c(rbind(series, notes))[keep],
                     col = colours[entry], lty = ifelse(symbol, lty[entry], 0L), lwd = lwd[entry],
                     pch = ifelse(symbol & panel$markers, pch[entry], NA), pt.cex = cex[entry],
                     bty = "n", cex = 0.8)
  }
}

# For each series of a panel's points (in order of appearance), the earlier series it coincides with:
# the same x values and y values nowhere further apart than `fraction` of the panel's y range (less than
# a pixel: one line hides the other). Each series is compared with the earlier ones that lie on no other,
# so a group points at its first series; `rank` numbers the series of a group (0 for the first), `gap` is
# the largest |difference|.
coinciding_series <- function(points, fraction = 1e-3) {
  series <- unique(points$series)
  values <- points$y[is.finite(points$y)]
  tolerance <- if (length(values) > 0L) fraction * diff(range(values)) else 0
  leader <- rep(NA_character_, length(series))
  gap <- rep(NA_real_, length(series))
  for (i in seq_along(series)) {
    a <- points[points$series == series[[i]], , drop = FALSE]
    for (j in seq_len(i - 1L)) {
      b <- points[points$series == series[[j]], , drop = FALSE]
      if (!is.na(leader[[j]]) || nrow(a) == 0L || nrow(a) != nrow(b) || any(abs(a$x - b$x) > 1e-9) ||
          !identical(is.na(a$y), is.na(b$y))) {
        next
      }
      difference <- abs(a$y - b$y)[!is.na(a$y)]
      largest <- if (length(difference) > 0L) max(difference) else 0
      if (largest <= tolerance) {
        leader[[i]] <- series[[j]]
        gap[[i]] <- largest
        break
      }
    }
  }
  rank <- vapply(seq_along(series), function(i) {
    if (is.na(leader[[i]])) 0L else sum(leader[seq_len(i)] == leader[[i]], na.rm = TRUE)
  }, integer(1))
  data.frame(series = series, leader = leader, gap = gap, rank = rank, stringsAsFactors = FALSE)
}

# The legend's note for each series: NA, or which series it coincides with ("same values as", or "lies
# on" with the largest difference).
coinciding_notes <- function(matches) {
  ifelse(is.na(matches$leader), NA_character_,
         ifelse(matches$gap == 0, sprintf("  same values as %s", matches$leader),
                sprintf("  lies on %s (max |\u0394| %.0e)", matches$leader, matches$gap)))
}

convergence_ggplot <- function(panels) {
  lines <- do.call(rbind, lapply(panels, function(panel) {
    if (is.null(panel$points) || nrow(panel$points) == 0L) {
      return(NULL)
    }
    cbind(panel$points, panel = panel$title, markers = panel$markers, stringsAsFactors = FALSE)
  }))
  lines$panel <- factor(lines$panel, levels = unique(lines$panel))
  lines$line <- ifelse(lines$dashed, "dashed", "solid")
  ggplot2::ggplot(lines, ggplot2::aes(x = .data$x, y = .data$y, colour = .data$series)) +
    ggplot2::geom_line(ggplot2::aes(linetype = .data$line), alpha = 0.8) +
    ggplot2::geom_point(data = lines[lines$markers, , drop = FALSE], size = 1.5) +
    ggplot2::scale_linetype_identity() +
    ggplot2::scale_x_continuous(breaks = whole_breaks) +
    ggplot2::facet_wrap(ggplot2::vars(.data$panel), scales = "free_y") +
    ggplot2::labs(x = "epoch", y = NULL, colour = NULL) +
    ggplot2::theme_bw()
}

# Axis breaks at whole epochs only.
whole_breaks <- function(limits) {
  breaks <- pretty(limits)
  breaks[breaks == round(breaks)]
}
